// The parameter server's optional hierarchy (dist.ps.hierarchical, messages transport): the
// workers of one node (dist/comm/nodes.h's layout restricted to the worker ranks; dedicated
// servers are no workers) form a node group whose lowest rank is its leader.
//   1. backward: each complete bucket's gradients are reduced onto the leader over the node's
//      communicator, from the gradient hooks; the leader alone pushes the node's sum;
//   2. step: the leader alone sends the step message; the servers treat the leaders as their
//      workers but average over every worker (dist/ps/server.h);
//   3. before a forward and at sync points: the leader takes what the consistency requires,
//      then broadcasts the parameters and their versions to its node.
// So BSP stays the single-process step on the global batch, and every worker of a node reads
// the same version (its staleness is its leader's).
#pragma once

#include "dist/comm/communicator.h"
#include "dist/step_comm.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class PsHierarchy {
 public:
  // Waits for a node operation, serving meanwhile (a colocated server must keep moving).
  using Wait = std::function<void(Work&, const std::string& what)>;

  // Collective over `mpi_world` (every rank, servers too), whose ranks [0, num_workers) are
  // the workers.
  PsHierarchy(Communicator& mpi_world, int num_workers);

  bool is_leader() const { return is_leader_; }
  // Every node's leader, as world ranks, ascending: the ranks that push and pull.
  const std::vector<int>& leaders() const { return leaders_; }
  // "hierarchical, 2 nodes (leaders: ranks 0, 2)" for the plan line.
  std::string describe() const;

  // Starts summing `grads` (host, contiguous) of every worker of the node into the leader's
  // `grads`; the others' are only read. Asynchronous until the Work's wait().
  std::unique_ptr<Work> reduce(torch::Tensor grads);
  // Records a completed reduce() of `bytes` into `into`, in the node's group.
  void record_reduce(std::unique_ptr<Work> work, int64_t bytes, StepComm& into) const;
  // Copies the leader's `flats` (the parameters, any device) and `versions` into every worker
  // of the node. Blocking, through `wait`; recorded into `into`.
  void share(std::vector<torch::Tensor>& flats, std::vector<int64_t>& versions, const Wait& wait,
             StepComm& into);

 private:
  std::shared_ptr<Communicator> node_;  // the node's workers (servers: a group of their own)
  std::vector<int> leaders_;
  bool is_leader_ = false;
};

}  // namespace dtrain::dist
