// What the strategies in which every rank holds the whole model and takes data (single, ddp,
// zero stage 1) have in common: the data group is the communicator's ranks, metrics are
// all-reduced over them, the model state is the module's own, the optimizer is built over
// the tensors the strategy chooses, and, when the subclass sets them up in attach(), a buffer
// sync before every forward and evaluation and a gradient reducer around backward.
#pragma once

#include "dist/buffer_sync.h"
#include "dist/reducer.h"
#include "dist/step_comm.h"
#include "dist/strategy.h"

#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

class ReplicatedStrategy : public Strategy {
 public:
  explicit ReplicatedStrategy(std::shared_ptr<Communicator> comm)
      : comm_(std::move(comm)), current_(comm_->rank(), comm_->size(), comm_->now()),
        last_(comm_->rank(), comm_->size()) {}

  DataGroup data_group() const override { return {comm_->rank(), comm_->size(), comm_}; }
  void reduce_metrics(torch::Tensor values, ReduceOp op) override;
  NamedTensors model_state() override { return module_state(*model_); }
  void load_model_state(const NamedTensors& state) override;
  void before_forward(int64_t step) override;
  void before_backward(bool last_micro_step) override;
  void after_backward(bool last_micro_step) override;
  void after_graph_pass() override;
  void after_replayed_backward() override;
  void before_eval() override;
  Stats stats() const override;
  std::vector<Span> last_step_spans() const override { return last_.spans(); }

 protected:
  // Bytes this rank holds for the whole run, by kind: the stats' memory/parameters_mb,
  // memory/gradients_mb and memory/optimizer_state_mb. By default the whole model, its
  // gradients (the reducer's buckets, or autograd's without one) and the optimizer's state.
  struct MemoryBytes {
    int64_t parameters = 0;
    int64_t gradients = 0;
    int64_t optimizer_state = 0;
  };
  virtual MemoryBytes memory() const;

  // The first thing a subclass's attach() does: remembers the model and its trainable
  // parameters, and makes every rank start from rank 0's parameters and buffers.
  void hold(torch::nn::Module& model);
  // Builds the optimizer over `owned` (kept for load(), which may rebuild a writer's).
  void build_optimizer(const std::vector<torch::Tensor>& owned, const OptimizerFactory& make);
  // Sets `lr`, steps the optimizer, and releases the gradients (through the reducer, if any).
  void optimizer_step(double lr);
  // The step's communication is complete: stats() reports it from now on.
  void end_step_record();

  std::shared_ptr<Communicator> comm_;
  torch::nn::Module* model_ = nullptr;
  std::vector<torch::Tensor> params_;  // trainable, in registration order
  std::vector<std::string> names_;
  std::vector<torch::Tensor> buffers_;
  OptimizerFactory make_optimizer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<BufferSync> buffer_sync_;   // none: buffers stay local
  std::unique_ptr<GradientReducer> reducer_;  // none: no gradient communication
  StepComm current_;  // the step in progress
  StepComm last_;     // the last completed step
};

}  // namespace dtrain::dist
