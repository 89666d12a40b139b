// The parameter server over point-to-point links on the device (dist.ps.transport = "p2p",
// colocated bsp and ssp; "auto" picks it on GPUs for ssp_reads = "partial"). Every rank is a
// worker and serves its chunks of the plan (dist/ps/plan.h) from its own device, as over
// collectives (dist/ps/collective.h), but a push is a send from one worker to one server,
// so a server sees each worker's push as it arrives. That is what partial reads need: a
// reduce completes only once every worker has joined it.
//
//   push   each chunk of a complete bucket is sent to its server from the gradient reducer's
//          hooks during backward (the chunks of this rank's own shard are copied); the step's
//          lr follows in a trailer once backward ends;
//   serve  a thread per rank applies the rounds and sends them (dist/ps/peer_server.h);
//   read   before each forward, each server's newest message that has arrived is copied into
//          the model, once it includes every update of the steps up to k + 1 back (ssp(k);
//          bsp: k = 0), waiting for it otherwise. With ssp_reads = "partial" the messages
//          include rounds in progress, which miss the pushes of the workers not yet in.
//
// The host chooses what a forward reads (on GPUs after the compute stream has drained, so
// that it sees what has arrived by then), and the staleness it reports is what was read.
// The links (dist/ps/peer_links.h) are four per pair of ranks (dist.ps.p2p_links): on one
// machine rings in memory the ranks map from one another, copied one-sidedly
// (dist/comm/shared_link.h), where no GPU work waits for a peer; otherwise the backend's
// communicators. Over NCCL each has a stream, and receives are posted before their sends,
// standing on the GPU until their peers send: a GPU needs a hardware queue per stream
// (CUDA_DEVICE_MAX_CONNECTIONS=32, which the trainer sets), or a receive waiting for a peer
// could hold up the compute queued behind it; and every kernel loaded before the links post
// anything (CUDA_MODULE_LOADING=EAGER and trainer/kernel_warmup.h), since a kernel's first
// launch may wait for all the GPU's work, such a receive included. For the same reason no
// layer takes a kernel that starts only once every SM is free (cuDNN's persistent BatchNorm:
// common/shared_kernels.h's standing communication), at a cost in bf16 (docs/PERFORMANCE.md).
//
// Sync points (evaluation, checkpoints, the end) read every server's last whole round; the
// model is then the servers' and the same on every rank, and BatchNorm's running statistics
// are averaged over the workers, as over collectives. SGD only (its preview, and no norms
// over servers: LARS's and LAMB's need every server at once); no codec.
#pragma once

#include "dist/options.h"
#include "dist/ps/peer_links.h"
#include "dist/ps/peer_server.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/ps/state_message.h"
#include "dist/replicated.h"

#include <c10/core/Stream.h>

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

class PsPeerStrategy : public ReplicatedStrategy, private CommHook {
 public:
  PsPeerStrategy(PsOptions options, std::shared_ptr<Communicator> world, double timeout_s);
  ~PsPeerStrategy() override;

  std::string name() const override { return "ps"; }
  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void after_backward(bool last_micro_step) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void before_eval() override { sync_point(); }
  void finish() override;

  NamedTensors model_state() override;
  void load_model_state(const NamedTensors& state) override;
  void prepare_checkpoint() override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;
  Stats stats() const override;

  const PsPlan& plan() const { return plan_; }
  // Steps between the oldest version the last forward read and the step it computed.
  int64_t last_staleness() const { return last_staleness_; }
  // The share of the parameters the last forward read from rounds in progress.
  double last_partial_reads() const { return last_partial_reads_; }
  // The share of the parameters the last forward read from a preview of its own step's round
  // (the others' pushes of the step it computes).
  double last_reads_ahead() const { return last_reads_ahead_; }
  // Workers' pushes of the steps before the last forward's that it did not read, averaged
  // over the parameters: W for a round a step late, 1 for one late share (what
  // scripts/delayed_sgd.py --late K models); negative where it read ahead. At most that
  // many: a read of a preview sent under several numbers at once may hold more.
  double last_shares_missing() const { return last_shares_missing_; }

 private:
  struct Pull {  // a message posted for, from one server
    int64_t index = 0;
    std::unique_ptr<Work> work;
  };

  // CommHook: a complete bucket's chunks go to their servers.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  Collective collective() const override { return Collective::kSend; }
  // The bucket's chunks that go to other ranks' servers (the own shard's are copied).
  int64_t payload_bytes(const Bucket& bucket) const override;
  torch::Tensor own_push();
  // Bytes of the ring of the shared link from `from` to `to` (pulls: from its server).
  int64_t ring_bytes(int from, int to, bool pulls) const;

  // Reads each server's newest message, numbered at least `least` (-1: any); with `exact`,
  // message `least` itself, nothing newer (BSP's read).
  void read(int64_t least, bool exact = false);
  // Partial reads: waits up to dist.ps.partial_wait of the last step for every server's
  // message `index` (or a newer one); returns early once all are in.
  void await_preview(int64_t index);
  // Server `s`'s newest message that has arrived (-1: none), without waiting.
  int64_t newest_now(int s);
  // From server `s`: the newest of its messages that has arrived, at least `least`.
  int64_t newest_arrived(int s, int64_t least);
  // Copies server `s`'s chunks from `values` (laid out as its shard) into the model.
  void copy_in(int s, const torch::Tensor& values);
  // The message that holds every update of steps < `clock` (-1: none).
  int64_t whole_round_message(int64_t clock) const;
  void sync_point();

  PsOptions options_;
  double timeout_s_;
  int64_t staleness_ = 0;  // ssp's k; 0 for bsp
  bool previews_ = false;  // ssp_reads = "partial"
  int64_t per_round_ = 1;  // messages a round: its previews, then itself
  bool shared_links_ = false;  // dist.ps.p2p_links, resolved
  bool standing_ = false;      // communicator links on GPUs: receives stand on the device
  std::optional<c10::Stream> server_stream_;  // GPUs
  PsPlan plan_;
  std::unique_ptr<PsShard> shard_;
  std::vector<PsPeerLinks> links_;
  std::unique_ptr<PsPeerServer> server_;  // none where this rank's shard is empty
  std::vector<torch::Tensor> param_flat_;  // per bucket: the model's parameters, as views
  std::vector<int64_t> server_numel_;      // elements each server holds
  std::vector<int64_t> offset_in_server_;  // per chunk: its offset in its server's layout
  std::vector<std::vector<torch::Tensor>> pull_slots_;  // [server][message % slots]
  std::vector<std::deque<Pull>> pulls_;                 // [server]: posted, oldest first
  std::vector<int64_t> read_index_;  // [server]: the message the model holds (-1: none)
  std::vector<std::unique_ptr<Work>> sends_;  // trailers and final pushes in flight
  torch::Tensor own_push_;  // this step's chunks of this rank's own shard
  int64_t clock_ = 0;
  bool finished_ = false;
  std::optional<std::chrono::steady_clock::time_point> last_forward_;  // for partial_wait

  // Stats: the time the step waited (the compute stream's wait included, on GPUs).
  std::vector<std::pair<std::shared_ptr<const TimePoint>, std::shared_ptr<const TimePoint>>>
      waits_, last_waits_;
  int64_t last_staleness_ = 0, max_staleness_ = 0;
  double last_partial_reads_ = 0.0, last_reads_ahead_ = 0.0, last_shares_missing_ = 0.0;
  std::vector<ps::StateMessage> gathered_;  // rank 0, between prepare_checkpoint and save
};

}  // namespace dtrain::dist
