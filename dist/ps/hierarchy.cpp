#include "dist/ps/hierarchy.h"

#include "dist/comm/mpi_communicator.h"

#include <fmt/format.h>

namespace dtrain::dist {

PsHierarchy::PsHierarchy(Communicator& mpi_world, int num_workers) {
  const WorldInfo world = init_world();
  const bool is_worker = mpi_world.rank() < num_workers;
  // Servers split off into a group of their own (color num_nodes), which never communicates.
  node_ = mpi_world.split(is_worker ? world.node : world.num_nodes, mpi_world.rank());
  is_leader_ = is_worker && node_->rank() == 0;
  torch::Tensor mine = torch::tensor({static_cast<int64_t>(is_leader_ ? mpi_world.rank() : -1)});
  torch::Tensor all = torch::empty({mpi_world.size()}, torch::kInt64);
  mpi_world.all_gather(mine, all)->wait();
  for (int64_t r = 0; r < all.numel(); ++r) {
    if (all[r].item<int64_t>() >= 0) leaders_.push_back(static_cast<int>(r));
  }
}

std::string PsHierarchy::describe() const {
  std::string ranks;
  for (const int leader : leaders_) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", leader);
  return fmt::format("hierarchical, {} node{} (leaders: rank{} {})", leaders_.size(),
                     leaders_.size() == 1 ? "" : "s", leaders_.size() == 1 ? "" : "s", ranks);
}

std::unique_ptr<Work> PsHierarchy::reduce(torch::Tensor grads) {
  return node_->reduce(std::move(grads), 0, ReduceOp::kSum);
}

void PsHierarchy::record_reduce(std::unique_ptr<Work> work, int64_t bytes, StepComm& into) const {
  into.add_in_group(node_->rank(), node_->size(), Collective::kReduce, Traffic::kGradients, bytes,
                    std::move(work));
}

void PsHierarchy::share(std::vector<torch::Tensor>& flats, std::vector<int64_t>& versions,
                        const Wait& wait, StepComm& into) {
  if (node_->size() == 1) return;
  torch::NoGradGuard no_grad;  // the flats hold the model's parameters
  for (torch::Tensor& flat : flats) {
    // MPI moves host memory: GPU workers' parameters go through a host copy.
    torch::Tensor host = flat.device().is_cpu() ? flat : flat.cpu();
    std::unique_ptr<Work> work = node_->broadcast(host, 0);
    wait(*work, "sharing the parameters in a node: a worker or its leader did not join");
    if (!flat.device().is_cpu() && !is_leader_) flat.copy_(host);
    into.add_in_group(node_->rank(), node_->size(), Collective::kBroadcast, Traffic::kParameters,
                      host.numel() * static_cast<int64_t>(host.element_size()), std::move(work));
  }
  // The versions travel too: every worker's staleness is its leader's.
  torch::Tensor held = torch::tensor(versions, torch::kInt64);
  std::unique_ptr<Work> work = node_->broadcast(held, 0);
  wait(*work, "sharing the parameters' versions in a node: a worker or its leader did not join");
  const int64_t* shared = held.data_ptr<int64_t>();
  versions.assign(shared, shared + versions.size());
  into.add_in_group(node_->rank(), node_->size(), Collective::kBroadcast, Traffic::kSmall,
                    held.numel() * 8, std::move(work));
}

}  // namespace dtrain::dist
