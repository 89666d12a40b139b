// The parameter server over collectives (dist.ps.transport = "collectives", the default for
// colocated bsp and ssp on GPUs): every rank is a worker and serves its chunks of the plan
// (dist/ps/plan.h) from its own device, and the push and the pull are collectives of the
// world's communicator (NCCL on GPUs, Open MPI on CPU ranks):
//   push  each chunk of a complete bucket is reduced onto its server, from the gradient
//         reducer's hooks during backward (pushes overlap backward; the sum runs on the
//         links, not on the server);
//   apply the server applies the average of clock c's pushes to its chunks in one step of
//         the run's optimizer (dist/ps/shard.h: LARS's and LAMB's norms are the whole
//         tensors');
//   pull  each chunk is broadcast from its server into a parameter slot; a forward copies
//         the version it reads from its slot into the model.
// The message transport (dist/ps/ps.h) moves the same data with point-to-point messages
// through host memory; this one keeps it on the device and lets NCCL sum, which is what GPUs
// need. A collective joins every worker, so it serves no async consistency and no dedicated
// servers.
//
// Staleness as a pipeline. SSP(k) lets a worker computing clock t read any version >= t - k
// (every update of clocks <= t - k - 1). Here it reads exactly version max(0, t - k), and the
// slack hides communication: clock c's pushes are applied d = min(k, 1) steps later (the
// reduces run behind the next step's compute) and its broadcast is read e = k - d steps after
// it was issued. So bsp (k = 0) waits for both, ssp(1) hides the push, ssp(2) the push and the
// pull. A slow worker holds the others back only once they are k steps ahead: the collectives
// of the clocks in between are in flight, not waited for. Versions and reads are the same on
// every rank and every run: training is deterministic.
//
// GPU streams: a collective starts after the work issued before it on the compute stream,
// and a wait makes the compute stream wait, not the host (dist/comm/communicator.h). That
// alone orders the slots: a gradient slot is copied into before its reduce starts and reused
// only after its clock was applied (which waited for the reduce); a parameter slot is read on
// the compute stream before the broadcast that overwrites it is issued.
#pragma once

#include "dist/options.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/replicated.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class PsCollectiveStrategy : public ReplicatedStrategy, private CommHook {
 public:
  PsCollectiveStrategy(PsOptions options, std::shared_ptr<Communicator> world);

  std::string name() const override { return "ps"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void after_backward(bool last_micro_step) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void before_eval() override { sync_point(); }
  void finish() override { sync_point(); }

  NamedTensors model_state() override;
  void load_model_state(const NamedTensors& state) override;
  void prepare_checkpoint() override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  Stats stats() const override;

  const PsPlan& plan() const { return plan_; }
  // Steps between the version the last forward read and the step it computed.
  int64_t last_staleness() const { return last_staleness_; }

 private:
  struct Slot {
    std::vector<torch::Tensor> flat;            // per bucket
    std::vector<std::unique_ptr<Work>> works;   // its collectives in flight
    double lr = 0.0;                            // gradient slots: the clock's lr
  };

  // CommHook: a complete bucket's chunks are reduced onto their servers.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  Collective collective() const override { return Collective::kReduce; }

  // The servers apply clock `clock`'s pushes and broadcast version clock + 1.
  void apply(int64_t clock);
  // The model takes version `version` (issued, not necessarily arrived).
  void read(int64_t version);
  // Every clock applied and read: the model holds every update, the same on every rank;
  // BatchNorm statistics averaged over the workers.
  void sync_point();

  PsOptions options_;
  int64_t push_delay_ = 0;  // d: steps between a clock's pushes and their application
  int64_t pull_delay_ = 0;  // e: steps between a version's broadcast and its read
  PsPlan plan_;
  std::unique_ptr<PsShard> shard_;
  std::vector<torch::Tensor> param_flat_;  // per bucket: the model's parameters, as views
  std::vector<Slot> grad_slots_;           // d + 1, by clock
  std::vector<Slot> param_slots_;          // e + 1, by version
  int64_t clock_ = 0;    // steps taken
  int64_t applied_ = 0;  // clocks applied: the newest version issued
  int64_t read_ = 0;     // the version in the model

  // Stats: the time the step waited (the compute stream, on GPUs), from these moments.
  std::vector<std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>>
      waits_, last_waits_;
  int64_t last_staleness_ = 0, max_staleness_ = 0;
  std::vector<ps::StateMessage> gathered_;  // rank 0, between prepare_checkpoint and save
};

}  // namespace dtrain::dist
