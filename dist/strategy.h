// The strategy seam: the training loop calls a Strategy at fixed points and knows nothing
// else of how workers cooperate. `single` (one rank, no communication) is a strategy too.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

// Builds the optimizer over whichever tensors the strategy decides to update locally
// (the whole model, a rank's shard, nothing on a PS worker).
using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(const std::vector<torch::Tensor>&)>;

// What communication cost in the last completed step, reported in the metrics under comm/.
struct StepStats {
  int64_t bytes = 0;        // payload reduced (or sent) per rank
  int64_t collectives = 0;  // operations issued (DDP: buckets, plus buffer syncs)
  double comm_ms = 0.0;     // time the operations ran, summed
  double exposed_ms = 0.0;  // communication the compute did not hide: the step waited for it
  double busbw_gbps = 0.0;  // all-reduce bus bandwidth, nccl-tests' formula: bytes/comm_ms x 2(n-1)/n
};

class Strategy {
 public:
  virtual ~Strategy() = default;
  virtual std::string name() const = 0;
  // Takes ownership of the training state: synchronises initial weights, builds the optimizer.
  virtual void attach(torch::nn::Module& model, const OptimizerFactory& make_optimizer) = 0;
  // Before the first forward of step `step`.
  virtual void before_forward(int64_t step) { (void)step; }
  // Before each micro-step's backward; `last_micro_step` as in after_backward.
  virtual void before_backward(bool last_micro_step) { (void)last_micro_step; }
  // After each micro-step's backward; `last_micro_step` marks the one whose gradients
  // complete the step (gradient accumulation communicates only then).
  virtual void after_backward(bool last_micro_step) { (void)last_micro_step; }
  // Before evaluation: make the model this rank evaluates consistent with the other ranks'.
  virtual void before_eval() {}
  // Tensors whose .grad() holds the step's final gradients once after_backward(true) returned
  // (what loss scaling must unscale and check).
  virtual std::vector<torch::Tensor> gradient_owners() = 0;
  // The update, with learning rate `lr`, then gradients are cleared for the next step.
  virtual void step(double lr) = 0;
  // On every rank before rank 0 writes a checkpoint: a strategy whose optimizer state is
  // sharded over the ranks gathers it here for save().
  virtual void prepare_checkpoint() {}
  // Optimizer state, written by rank 0 under checkpoint directory `dir`; read back by every
  // rank.
  virtual void save(const std::string& dir) const = 0;
  virtual void load(const std::string& dir) = 0;
  // Only for strategies that communicate (single returns nothing).
  virtual std::optional<StepStats> stats() const { return std::nullopt; }
  // Bytes of optimizer state this rank holds (optim::state_bytes): what sharding saves.
  virtual int64_t optimizer_state_bytes() const = 0;
};

}  // namespace dtrain::dist
