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
// (every update of clocks <= t - k - 1). The servers issue version c + 1 as soon as clock c's
// pushes are in, and the slack hides communication and absorbs delays:
//   GPUs     the servers work on a stream of their own: clock c's pushes are applied as soon
//            as its reduces complete, without holding up the compute stream. A worker waits
//            (its compute stream does) only for version t - k's broadcast, which needs every
//            worker to have issued it: so it may lead the slowest by k steps. k + 1 gradient
//            slots and k + 1 parameter slots; events order each slot's reuse across streams.
//   CPU      MPI has no streams: the host waits where it applies. Clock c is applied d =
//   ranks    min(k, 1) steps later (its reduces run behind the next step).
// Which version a forward reads (dist.ps.ssp_reads):
//   newest   the newest that has arrived, at least t - k. On GPUs the host runs ahead of the
//            device, so the device chooses: a version's slot is stamped with its number once
//            its broadcast has landed (on a stream of its own), and the forward copies in the
//            slot with the highest stamp. The run then depends on timing, as any parameter
//            server's does; the staleness each step saw is in the metrics.
//   exact    always max(0, t - k): the same on every rank and every run (training is
//            deterministic), but every read is k steps old even when nobody is slow.
// With dist.ps.predict_weights a read of version v at clock t takes w_v + (t - v)(w_v - w_{v-1}):
// v's last step repeated for the steps it is late, what a momentum-dominated run would have
// reached (SpecTrain's weight prediction, Chen et al. 2018). One more slot keeps w_{v-1}.
// On GPUs with newest reads the device predicts from the slot it chose and the one before
// it. No prediction where the slot before does not hold v - 1 (the first read after a load).
// bsp (k = 0) waits for both, on either: about ZeRO-1's cost.
//
// Compressed pushes (dist.compression): a worker's bucket goes through the codec. The casts
// keep the push's shape (each chunk of the cast message reduced onto its server, which decodes
// its chunks); PowerSGD's factors are all-reduced and top-k and sign messages all-gathered as
// under DDP (dist/compression/codec.h), and every worker decodes the average. The decode
// fills the clock's gradient slot when backward ends, and each server applies its chunks of
// it when the clock is due: the staleness pipeline keeps its slots and its bound, but a
// clock's exchange completes within its own step (not behind the next one).
// Error feedback is per worker over what it pushed, as under DDP; codec state is checkpointed
// per worker (codec_rank{R}.pt).
//
// Otherwise a collective starts after the work issued before it on the stream that issues it,
// and a wait makes that stream wait, not the host (dist/comm/communicator.h).
#pragma once

#include "dist/compression/codec_hook.h"
#include "dist/options.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/replicated.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

class PsCollectiveStrategy : public ReplicatedStrategy, private CommHook {
 public:
  PsCollectiveStrategy(PsOptions options, std::shared_ptr<Communicator> world,
                       CompressionOptions compression = {});
  ~PsCollectiveStrategy() override;

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
  // Steps between the version the last forward read and the step it computed (GPUs with
  // ssp_reads = "newest": the most it may be; stats() has what the device chose).
  int64_t last_staleness() const { return last_staleness_; }
  // The codec (none without dist.compression): its residuals are what this worker has yet to
  // push of its gradients.
  const compression::Codec* codec() const {
    return codec_hook_ ? &codec_hook_->codec() : nullptr;
  }

 private:
  struct Slot {
    std::vector<torch::Tensor> flat;            // per bucket
    std::vector<std::unique_ptr<Work>> works;   // its collectives in flight
    double lr = 0.0;                            // gradient slots: the clock's lr
    bool averaged = false;  // gradient slots: a codec decoded the average (else: the sum)
  };

  // CommHook: a complete bucket's chunks are reduced onto their servers.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  Collective collective() const override { return Collective::kReduce; }
  // The current clock's gradient slot of bucket `b`, free to be written (on GPUs: the
  // compute stream waits until the servers have taken the slot's last clock).
  torch::Tensor writable_grad_slot(size_t b);

  // The servers apply clock `clock`'s pushes and broadcast version clock + 1.
  void apply(int64_t clock);
  // The model takes version `version` (issued, not necessarily arrived).
  void read(int64_t version);
  // ssp_reads = "newest": the model takes the newest version that has arrived, at least
  // `required` (on GPUs chosen by the device, see above).
  void read_newest(int64_t required);
  // Slot `slot` holds the version the model holds (on GPUs with newest reads: stamped as
  // arrived), so that a forward may read it or predict from it.
  void hold_model_version(size_t slot);
  // The broadcasts into `slot` are waited for (by the current stream) and counted.
  void settle(Slot& slot);
  // GPUs, newest: the staleness of `version` ([1], on the device), last and most.
  void record_device_staleness(const torch::Tensor& version);
  // Every clock applied and read: the model holds every update, the same on every rank;
  // BatchNorm statistics averaged over the workers.
  void sync_point();

  PsOptions options_;
  CompressionOptions compression_;
  std::unique_ptr<compression::CodecHook> codec_hook_;  // with a codec: the reducer's hook
  std::vector<std::string> gathered_codec_states_;     // rank 0, between prepare and save
  int64_t push_delay_ = 0;  // steps between a clock's pushes and their application
  std::optional<c10::Stream> server_stream_;  // GPUs: the servers' work
  std::vector<c10::Event> grad_slot_read_;  // GPUs, per gradient slot: its clock applied
  PsPlan plan_;
  std::unique_ptr<PsShard> shard_;
  std::vector<torch::Tensor> param_flat_;  // per bucket: the model's parameters, as views
  std::vector<Slot> grad_slots_;           // by clock
  std::vector<Slot> param_slots_;          // by version
  std::vector<torch::Tensor> param_stack_;  // per bucket: [param slots, numel], a slot a row
  std::vector<int64_t> slot_holds_;         // each param slot's version, as issued (-1: none)
  bool newest_ = false;                     // ssp_reads = "newest" (and staleness > 0)
  bool predict_ = false;                    // predict_weights (and staleness > 0)
  // GPUs, newest: each param slot's version once arrived (-1: none), on the device; the
  // stream that stamps it after the slot's broadcasts, and an event after each stamp.
  torch::Tensor slot_version_;
  std::optional<c10::Stream> stamp_stream_;
  std::vector<c10::Event> slot_stamped_;
  torch::Tensor device_staleness_;  // GPUs, newest: [last, max] as the device chose
  int64_t clock_ = 0;    // steps taken
  int64_t applied_ = 0;  // clocks applied: the newest version issued
  int64_t read_ = 0;     // the version in the model (GPUs, newest: the least it may be)

  // Stats: the time the step waited (the compute stream, on GPUs), from these moments.
  std::vector<std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>>
      waits_, last_waits_;
  int64_t last_staleness_ = 0, max_staleness_ = 0;
  std::vector<ps::StateMessage> gathered_;  // rank 0, between prepare_checkpoint and save
};

}  // namespace dtrain::dist
