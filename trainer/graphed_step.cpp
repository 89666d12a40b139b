#include "trainer/graphed_step.h"

#include "common/error.h"

#ifdef DTRAIN_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <utility>

namespace dtrain::trainer {

namespace {

// Eager passes before the capture, on the capture's stream: cuDNN's algorithm search, lazy
// library handles and the allocator's first blocks happen there rather than in the graph.
constexpr int kWarmupPasses = 3;

bool same_shape(const torch::Tensor& a, const torch::Tensor& b) {
  return a.sizes() == b.sizes() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

}  // namespace

#ifdef DTRAIN_CUDA
struct GraphedStep::Graph {
  at::cuda::CUDAGraph cuda;
};

namespace {

void end_failed_capture(GraphedStep::Graph& graph) {
  try {
    graph.cuda.capture_end();
  } catch (const std::exception&) {
  }
}

}  // namespace
#else
struct GraphedStep::Graph {};  // never made: capture() refuses without CUDA
#endif

GraphedStep::GraphedStep(std::vector<torch::Tensor> params, std::vector<torch::Tensor> buffers,
                         ForwardBackward forward_backward, AfterPass after_pass)
    : params_(std::move(params)),
      buffers_(std::move(buffers)),
      forward_backward_(std::move(forward_backward)),
      after_pass_(std::move(after_pass)) {}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const data::Batch& batch) {
  if (!graph_) capture(batch);
  replayed_ = same_shape(batch.images, images_) && same_shape(batch.labels, labels_);
  if (!replayed_) return run_eagerly(batch);
#ifdef DTRAIN_CUDA
  images_.copy_(batch.images);
  labels_.copy_(batch.labels);
  graph_->cuda.replay();
  ++replays_;
#endif
  attach_gradients();
  return loss_;
}

void GraphedStep::capture(const data::Batch& batch) {
#ifdef DTRAIN_CUDA
  DTRAIN_CHECK(batch.images.is_cuda(), "train.cuda_graph: the batch is not on the GPU");
  images_ = batch.images.clone();
  labels_ = batch.labels.clone();
  std::vector<torch::Tensor> saved;
  for (const torch::Tensor& buffer : buffers_) saved.push_back(buffer.detach().clone());

  // Captured work must run on a stream of its own; it joins the caller's stream both ways.
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(caller);
  inputs_ready.block(side);
  {
    const c10::cuda::CUDAStreamGuard on_side(side);
    for (int pass = 0; pass < kWarmupPasses; ++pass) {
      forward_backward_(images_, labels_);
      if (after_pass_) after_pass_();
      for (torch::Tensor& param : params_) param.mutable_grad().reset();
    }
    {
      const torch::NoGradGuard no_grad;
      for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].copy_(saved[i]);
    }
    // Gradients released above: backward allocates them inside the graph's memory pool, where
    // every replay writes them again. Thread-local capture: the loader's threads may copy
    // batches to the GPU meanwhile.
    graph_ = std::make_unique<Graph>();
    graph_->cuda.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      loss_ = forward_backward_(images_, labels_);
    } catch (...) {
      end_failed_capture(*graph_);  // the stream leaves capture mode; the first error stands
      throw;
    }
    graph_->cuda.capture_end();
  }
  for (const torch::Tensor& param : params_) gradients_.push_back(param.grad());
  if (after_pass_) {
    const c10::cuda::CUDAStreamGuard on_side(side);
    after_pass_();
  }
  at::cuda::CUDAEvent captured;
  captured.record(side);
  captured.block(caller);
#else
  (void)batch;
  throw UserError("train.cuda_graph needs a LibTorch with CUDA");
#endif
}

torch::Tensor GraphedStep::run_eagerly(const data::Batch& batch) {
  // Backward accumulates into defined gradients in place: zeroed, they end up holding this
  // batch's alone, in the tensors the next replay writes.
  attach_gradients();
  for (torch::Tensor& gradient : gradients_) {
    if (gradient.defined()) gradient.zero_();
  }
  ++eager_runs_;
  return forward_backward_(batch.images, batch.labels).detach();
}

void GraphedStep::attach_gradients() {
  for (size_t i = 0; i < params_.size(); ++i) {
    if (gradients_[i].defined()) params_[i].mutable_grad() = gradients_[i];
  }
}

}  // namespace dtrain::trainer
