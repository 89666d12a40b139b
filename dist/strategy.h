// The strategy seam: the training loop calls a Strategy at fixed points and knows nothing
// else of how ranks cooperate. `single` (one rank, no communication) is a strategy too.
// Besides the step, a strategy owns everything that depends on it: each rank's role, which
// ranks take data, how metrics are reduced over them, the model state that checkpoints,
// evaluation and export read, and its named stats.
#pragma once

#include "dist/comm/communicator.h"

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

// Builds the optimizer over whichever tensors the strategy decides to update locally
// (the whole model, a rank's shard, a server's chunks).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)>;

// A model's state by name: parameters, then buffers, with the model's own names.
using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

// What a rank does. Workers run the training loop; a server (a dedicated parameter-server
// rank) takes no data and runs the strategy's serve() instead.
enum class Role { kWorker, kServer };

// The ranks that take data and this rank's place among them: what the sampler shards by,
// and the communicator over them (SyncBatchNorm's statistics); null on a rank that takes none.
struct DataGroup {
  int rank = 0;
  int size = 1;
  std::shared_ptr<Communicator> comm;
};

// One figure of the last completed step, under its metrics key ("comm/bytes", ...).
struct Stat {
  std::string name;
  double value = 0.0;
};
using Stats = std::vector<Stat>;

// Something that took time in a step, for the timeline (run.trace): milliseconds from the
// step's start, on the clock of the device it ran on.
struct Span {
  std::string name;
  double start_ms = 0.0;
  double duration_ms = 0.0;
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;

  // ---- Roles and data. Known from construction, before attach().
  virtual Role role() const { return Role::kWorker; }
  virtual DataGroup data_group() const = 0;
  // The data group's ranks still training: all of them, but for workers lost under the
  // parameter server's dist.ps.tolerate_worker_loss.
  virtual int ranks_training() const { return data_group().size; }
  // On a server: serves the workers until they finish, then returns. Never called on workers.
  virtual void serve();
  // Sums or averages `values` (a small tensor on the device the workers train on) over the
  // data group, in place. Blocking; every worker calls it at the same points.
  virtual void reduce_metrics(torch::Tensor values, ReduceOp op) = 0;

  // ---- Training, in this order per step: before_forward, then per micro-step
  // before_backward, backward, after_backward; then step.
  // Takes over the training state: synchronises initial weights, builds the optimizer. A
  // strategy that acts around each unit's forward and backward (ZeRO-3) finds the units
  // through dtrain::UnitModule (common/units.h), which the models implement.
  virtual void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) = 0;
  virtual void before_forward(int64_t step) { (void)step; }
  // `last_micro_step`: this backward completes the step's gradients (gradient accumulation
  // communicates only then); hooks launched during backward need to know it before it starts.
  virtual void before_backward(bool last_micro_step) { (void)last_micro_step; }
  virtual void after_backward(bool last_micro_step) { (void)last_micro_step; }
  // The step's forward and backward as a CUDA graph (train.cuda_graph), for the strategies
  // the config lets capture (trainer/config.h: cuda_graph_blockers): before_backward(true),
  // the backward's hooks and after_backward(true) run while the step is captured, so the
  // graph holds the gradients' communication (DDP's all-reduces, overlapping backward as
  // they do eagerly) and each replay repeats it. Eager warm-up passes before the capture run
  // them too; after each, and after the capture, after_graph_pass() comes in place of
  // step(). Replayed communication is not timed: comm/ms and comm/exposed_ms are left out of
  // such steps' stats.
  // After a pass: releases its gradients and settles what the graph will hold (the gradient
  // buckets, re-planned after the first pass), without an update; the pass's communication
  // is not counted as the step's.
  virtual void after_graph_pass() {}
  // After each replay: records the replayed communication in the step's stats.
  virtual void after_replayed_backward();
  // Tensors whose .grad() holds the step's final gradients once after_backward(true)
  // returned (what fp16 loss scaling unscales and checks).
  virtual std::vector<torch::Tensor> gradient_owners() = 0;
  // The update, with learning rate `lr`; gradients are then released for the next step.
  virtual void step(double lr) = 0;
  // Before evaluation: make the model this rank evaluates consistent with the other ranks'.
  virtual void before_eval() {}
  // Whether forward communicates (ZeRO-3 gathers each unit), so that every worker must run
  // the same number of forwards, in evaluation as in training.
  virtual bool forward_communicates() const { return false; }
  // After the last step (and the last evaluation and checkpoint), on every worker: completes
  // the strategy's communication; servers return from serve().
  virtual void finish() {}
  // This rank stays idle this long (a straggler made on demand), between after_backward(true)
  // and step(). Blocking. A strategy that serves other ranks from this one (a colocated
  // parameter server) keeps serving meanwhile.
  virtual void pause(double seconds);

  // ---- State.
  // The model's consolidated state: every parameter and buffer whole, under the model's
  // names, in its registration order, on every rank (a sharding strategy gathers). May alias
  // the model's own tensors. Collective.
  virtual NamedTensors model_state() = 0;
  // Sets the model from a consolidated state with model_state()'s names and shapes. Every rank
  // passes the same state; a sharding strategy keeps its own part.
  virtual void load_model_state(const NamedTensors& state) = 0;
  // A checkpoint, on every worker, in this order (trainer/checkpoint.h has the protocol):
  // prepare_checkpoint(); save_partition() into the directory rank 0 created; once every
  // worker's returned, save() on rank 0. A strategy that gathers its state to rank 0 (the
  // parameter server's) does so in prepare_checkpoint() (collective); a sharded one writes
  // each rank's part in save_partition(), which never communicates.
  virtual void prepare_checkpoint() {}
  virtual void save_partition(const std::string& dir) const { (void)dir; }
  // The strategy's own state that rank 0 writes into checkpoint directory `dir` (optimizer
  // state, or a sharded strategy's index of its partitions). Never communicates.
  virtual void save(const std::string& dir) const = 0;
  // Every rank reads back the state it holds, from a checkpoint of any strategy.
  virtual void load(const std::string& dir) = 0;

  // ---- Figures of the last completed step (communication, memory), for the metrics. May
  // wait for the device: called only when the loop reports.
  virtual Stats stats() const = 0;
  // The last completed step's communication, one span per operation. Waits for the device.
  virtual std::vector<Span> last_step_spans() const { return {}; }
};

// The model's parameters and buffers by name, in registration order (aliases, no copies).
NamedTensors module_state(torch::nn::Module& module);

// For strategies that lay every parameter out in one flat buffer: a UserError naming the
// first two parameters (`names`, aligned) of different dtypes, or of none at all.
void require_one_dtype(const std::vector<torch::Tensor>& params,
                       const std::vector<std::string>& names, const std::string& strategy);

// Copies `state` into `targets` by position (same names, same shapes), skipping tensors that
// already are the target.
void copy_state(const NamedTensors& state, const NamedTensors& targets);

}  // namespace dtrain::dist
