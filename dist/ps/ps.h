// The `ps` strategy: workers and a sharded parameter server (Li et al. 2014), with the
// consistency of your choice: BSP, SSP(k) (Ho et al. 2013) or async.
//
// Roles. Placement "colocated": every rank is a worker and serves one shard; "dedicated":
// the last dist.ps.servers ranks only serve (CPU, fp32 master weights and optimizer state in
// host memory) and take no data, beside workers on the CPU or on GPUs (dist/placement.h: the
// workers' NCCL communicator spans the workers alone, and servers exchange with them over
// MPI only: pushed gradients copied to the host, parameters copied back to the GPU, the
// initial model broadcast from the host). The plan (dist/ps/plan.h) cuts the parameters into
// chunks and places them on the servers by bytes.
//
// A worker's step:
//   before_forward  takes the parameters the servers have sent and, if they are too old,
//                   waits for newer ones: bsp, every update of the steps before; ssp(k),
//                   every update of the steps up to k + 1 back; async, the answers to its
//                   own last push;
//   backward        the gradient reducer's hooks push each bucket's chunks to their servers
//                   as soon as the bucket is complete: pushes overlap backward;
//   step(lr)        tells every server that its pushes of the step are complete, and at
//                   which lr; the servers apply them (dist/ps/server.h) and send the chunks
//                   back. The worker's own optimizer does nothing: it has none.
//
// Progress. Servers run no thread of their own: a colocated server is polled by its worker
// wherever the worker waits (for parameters, pushes, metrics, a straggler's pause) and from
// its gradient hooks; a dedicated server polls in serve(). So no MPI call ever comes from two
// threads, and a server's work is ordered with its worker's.
//
// Sync points: evaluation, checkpoints and the end of training wait until every update of
// every step taken is in every worker's model (async: after a barrier, a pull), so the
// model evaluated and saved is the servers' and the same on every worker. BatchNorm running
// statistics stay local to each worker between sync points and are averaged over the
// workers at each (a collective per forward would undo SSP's point).
//
// Hierarchy (dist.ps.hierarchical, dist/ps/hierarchy.h): the workers of a node reduce their
// pushes onto the node's leader, which alone pushes, sends the control messages and takes
// the parameters, then broadcasts them (with their versions) to its node before each forward
// and at sync points.
//
// Worker loss (dist.ps.tolerate_worker_loss, async with dedicated servers): before each
// collective among the workers, a roll call on server 0 (dist/ps/live_workers.h) says who
// still trains; a lost worker is dropped by the servers, and the others go on over a
// communicator of their own. The lost worker's shard of the data (training and test) is no
// longer seen.
//
// Compressed pushes (dist.compression, not PowerSGD; dist/ps/push_codec.h): a worker (a
// leader, with a hierarchy) encodes each chunk it pushes, with error feedback of its own,
// and the chunk's server decodes it on arrival into the dense push it applies as before.
// Each worker's codec state is checkpointed as codec_rank{W}.pt (worker W), as DDP's is.
//
// Checkpoints hold whole tensors: model.pt, and optimizer.pt assembled from the servers'
// pieces, as single and ddp write them, so a run resumes on any number of servers, workers
// or strategies, and ps resumes from theirs.
#pragma once

#include "common/units.h"
#include "dist/options.h"
#include "dist/ps/hierarchy.h"
#include "dist/ps/plan.h"
#include "dist/ps/push_codec.h"
#include "dist/ps/server.h"
#include "dist/reducer.h"
#include "dist/step_comm.h"
#include "dist/strategy.h"

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

class PsStrategy : public Strategy, private CommHook {
 public:
  // `world`: this rank's device communicator, as the trainer builds it (dist/placement.h):
  // on a GPU worker, NCCL over the workers (every rank when colocated, the workers only when
  // dedicated); on a CPU rank, MPI. The roles come from the MPI world, and the protocol runs
  // over MPI with host tensors.
  // `compression`: the pushes' codec (kind "none": dense pushes).
  PsStrategy(PsOptions options, std::shared_ptr<Communicator> world, double timeout_s,
             CompressionOptions compression = {});
  ~PsStrategy() override;

  std::string name() const override { return "ps"; }
  Role role() const override { return is_worker_ ? Role::kWorker : Role::kServer; }
  DataGroup data_group() const override;
  int ranks_training() const override { return static_cast<int>(live_workers_.size()); }
  void serve() override;
  void reduce_metrics(torch::Tensor values, ReduceOp op) override;

  void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) override;
  void before_forward(int64_t step) override;
  void before_backward(bool last_micro_step) override;
  void after_backward(bool last_micro_step) override;
  std::vector<torch::Tensor> gradient_owners() override { return params_; }
  void step(double lr) override;
  void before_eval() override { sync_point(); }
  void finish() override;
  // Idle for `seconds` (a straggler on demand), serving meanwhile.
  void pause(double seconds) override;

  NamedTensors model_state() override;
  void load_model_state(const NamedTensors& state) override;
  void prepare_checkpoint() override;
  void save(const std::string& dir) const override;
  void load(const std::string& dir) override;

  Stats stats() const override;
  std::vector<Span> last_step_spans() const override { return last_.spans(); }

  const PsPlan& plan() const { return plan_; }
  // Steps between the parameters the last forward read and the step it computed (bsp: 0;
  // ssp(k): at most k; async: other workers' pushes applied between a read and the push).
  int64_t last_staleness() const { return last_staleness_; }
  // ssp_reads = "partial": the share of the chunks the last step's forward read from a round
  // in progress (the rest are whole versions).
  double last_partial_reads() const { return last_partial_reads_; }
  // Ranks that push and pull: every worker, or one leader per node with a hierarchy.
  int num_leaders() const;
  // The pushes' codec (none without dist.compression, and on server ranks).
  const ps::PushEncoder* push_encoder() const { return encoder_.get(); }

 private:
  class PushWork;
  // Polls before each unit's forward: messages keep moving while the model computes.
  class ForwardProgress : public UnitHooks {
   public:
    explicit ForwardProgress(PsStrategy& owner) : owner_(owner) {}
    void before_forward(int64_t unit) override { owner_.progress(); }

   private:
    PsStrategy& owner_;
  };
  struct Message {
    torch::Tensor data;
    std::unique_ptr<Work> work;
  };
  struct Receiving {  // per chunk: parameter messages on their way into the model
    Message next;                // being received, if work is set
    std::deque<Message> arrived;  // received, not yet applied, oldest first
  };

  // CommHook: a complete bucket's chunks go to their servers.
  std::unique_ptr<Work> launch(Bucket& bucket) override;
  Collective collective() const override { return Collective::kSend; }
  // A hierarchy's bucket work is a node reduce and, on a leader, the pushes: both counted.
  void record(Bucket& bucket, std::unique_ptr<Work> work, StepComm& into) override;
  // Sends bucket `bucket`'s chunks of `grads` (its gradients, on the host; with a codec on
  // any device, encoded first into `messages`, which the caller keeps until the sends
  // complete: MPI reads them) to their servers.
  std::vector<std::unique_ptr<Work>> push(int64_t bucket, const torch::Tensor& grads,
                                          std::vector<torch::Tensor>& messages);
  int64_t payload_bytes(const Bucket& bucket) const override;

  // Every rank, servers too, starts from rank 0's parameters and buffers. Collective.
  void broadcast_rank0_model();
  int server_rank(int server) const;  // in requests_ and replies_
  void poll_server();
  // poll_server(), and the parameter messages being received move on.
  void progress();
  // Polls until `done`; past dist.timeout_s the job ends with `what()`.
  void wait_until(const std::function<bool()>& done, const std::function<std::string()>& what,
                  double limit_s = 0.0);  // 0: dist.timeout_s
  void wait_polling(Work& work, const std::string& what);
  // A collective among the workers: polls this rank's server if it has one.
  void wait_workers(Work& work, const std::string& what);
  // Receives what the servers have sent, without touching the parameters: safe anywhere,
  // also inside backward.
  void receive_params();
  // Applies the parameter messages of `chunk` received so far, oldest first. Only where the
  // model is not computing.
  void apply_params(int64_t chunk);
  void apply_all_params();
  void send_control(int server, int64_t command, double value = 0.0);
  // Sums `host` (on the CPU) over the workers, in place; returns how many were summed. With
  // tolerate_worker_loss, through the roll call on server 0: those still training.
  int sum_over_workers(torch::Tensor host, const std::string& what);
  void sync_point();
  void barrier_polling();
  void average_buffers();
  void commit_load();
  // The leader's parameters and versions to its node's workers (with a hierarchy).
  void share_params();
  torch::Tensor receive_state(int server);

  PsOptions options_;
  CompressionOptions compression_;
  Consistency consistency_;
  std::shared_ptr<Communicator> world_;  // this rank's device communicator (see the constructor)
  double timeout_s_;
  int num_servers_ = 1;
  int num_workers_ = 1;
  bool is_worker_ = true;
  int worker_index_ = 0;
  std::shared_ptr<Communicator> requests_;      // MPI, every rank: workers to servers
  std::shared_ptr<Communicator> replies_;       // MPI, every rank: servers to workers
  std::shared_ptr<Communicator> workers_comm_;  // MPI, the workers: metrics, barriers
  std::vector<int> live_workers_;  // worker indices still training
  std::shared_ptr<Communicator> data_comm_;     // the workers on their device: SyncBatchNorm
  std::unique_ptr<PsHierarchy> hierarchy_;      // with dist.ps.hierarchical
  // Pushes, sends control messages and takes parameters: every worker, or with a hierarchy
  // its node's leader.
  bool is_leader_ = true;

  torch::nn::Module* model_ = nullptr;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> buffers_;
  OptimizerFactory make_optimizer_;
  PsPlan plan_;
  std::optional<PsServerSetup> server_setup_;  // on server ranks, until attach()
  std::unique_ptr<PsServer> server_;
  ForwardProgress forward_progress_{*this};
  UnitModule* units_ = nullptr;  // the model, if it has units: forward_progress_ is installed

  // Worker: the parameters as views of one flat tensor per bucket (the gradient layout).
  std::vector<torch::Tensor> param_flat_;
  std::vector<int64_t> bucket_of_first_param_;
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<torch::Tensor> node_grads_;  // hierarchy, per bucket: the host copy reduced
  std::vector<int64_t> version_;   // per chunk: updates in this worker's copy
  std::vector<int64_t> received_;  // per chunk: parameter messages taken
  std::vector<Receiving> receiving_;
  std::vector<int64_t> expected_;  // per chunk, async: answers due (pushes and pulls)
  std::vector<int64_t> read_version_;  // per chunk: what the last forward read
  std::vector<bool> partial_;  // per chunk: its last message was a round in progress
  std::vector<std::unique_ptr<Work>> control_sends_;
  std::vector<torch::Tensor> control_messages_;
  int64_t clock_ = 0;  // steps taken since attach
  bool first_forward_ = true;

  // Resuming: rank 0's whole optimizer, read by load() and sent to the servers at the next
  // sync point or forward.
  std::unique_ptr<torch::optim::Optimizer> whole_;
  bool load_pending_ = false;

  // Compressed pushes: the encoder (workers), the trainer's step (the codec's schedule and
  // warm-up count from it), each bucket's bytes sent in its last push, and rank 0's gathered
  // codec states between prepare_checkpoint() and save().
  std::unique_ptr<ps::PushEncoder> encoder_;
  int64_t step_ = 0;
  std::vector<int64_t> pushed_bytes_;
  // Each bucket's bytes pushed to other ranks' servers in its last push (comm/sent_bytes: a
  // push to this rank's own server moves nothing off the rank, as over p2p).
  std::vector<int64_t> sent_bytes_;
  std::vector<std::string> gathered_codec_states_;
  double last_decode_ms_ = 0.0;  // this rank's server's decoding in the last step

  // Stats.
  StepComm current_, last_;
  double wait_ms_ = 0.0, last_wait_ms_ = 0.0;
  int64_t staleness_ = 0, last_staleness_ = 0, max_staleness_ = 0;
  double partial_reads_ = 0.0, last_partial_reads_ = 0.0;
};

}  // namespace dtrain::dist
