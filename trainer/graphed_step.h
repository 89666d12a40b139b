// A training step's forward and backward captured once as a CUDA graph and replayed every
// step after (train.cuda_graph). A small model's step is bound by the host's kernel launches
// (ResNet-18 at 32x32: hundreds of kernels of a few microseconds each); a replay launches them
// all with one call. What the graph reads and writes stays at fixed addresses: the batch is
// copied into static input tensors, and the gradients land in the tensors the capture
// allocated, which are handed back to the parameters after each replay (the optimizer, run
// eagerly after it, may release them). The optimizer stays outside the graph because the
// learning rate changes from step to step.
//
// The capture needs a step with no host synchronisation and one shape: it is built for the
// `single` and `ddp` strategies with one micro-step, bf16 or fp32 (the config refuses the
// rest). DDP's hooks run inside the capture (dist::Strategy::after_graph_pass): the graph
// holds the all-reduces too, overlapping backward, and the gradients it leaves are the
// averaged ones in the reducer's buckets. A batch of another shape (an epoch's short last
// batch) runs eagerly into the same gradient tensors.
#pragma once

#include "data/loader.h"

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <vector>

namespace dtrain::trainer {

class GraphedStep {
 public:
  // Forward and backward of one batch, returning the loss (detached or not); run eagerly for
  // the warm-up and the odd-shaped batch, and once under capture.
  using ForwardBackward =
      std::function<torch::Tensor(const torch::Tensor& images, const torch::Tensor& labels)>;

  // Called after each eager warm-up pass and after the capture, before the gradients are
  // released (the strategy settles its buckets there: the graph holds them).
  using AfterPass = std::function<void()>;

  // `params`: whose gradients the step produces; `buffers`: state the forward updates in place
  // (BatchNorm's statistics), restored after the warm-up passes so that capturing does not
  // change the run.
  GraphedStep(std::vector<torch::Tensor> params, std::vector<torch::Tensor> buffers,
              ForwardBackward forward_backward, AfterPass after_pass = nullptr);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  // Forward and backward on `batch` (captured on the first call); afterwards the parameters'
  // gradients hold the batch's. The loss returned is overwritten by the next call.
  torch::Tensor run(const data::Batch& batch);

  // Whether the last run() replayed the graph (rather than ran eagerly).
  bool replayed() const { return replayed_; }
  // Replays so far, and batches run eagerly because of their shape.
  int64_t replays() const { return replays_; }
  int64_t eager_runs() const { return eager_runs_; }

  struct Graph;  // the CUDA graph (trainer/graphed_step.cpp)

 private:
  void capture(const data::Batch& batch);
  torch::Tensor run_eagerly(const data::Batch& batch);
  void attach_gradients();

  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> buffers_;
  ForwardBackward forward_backward_;
  AfterPass after_pass_;
  std::unique_ptr<Graph> graph_;
  torch::Tensor images_, labels_, loss_;  // the graph's input and output
  std::vector<torch::Tensor> gradients_;  // by parameter; undefined where it has none
  bool replayed_ = false;
  int64_t replays_ = 0;
  int64_t eager_runs_ = 0;
};

}  // namespace dtrain::trainer
