// train.cuda_graph (trainer/graphed_step.h) on a GPU: a captured and replayed forward and
// backward gives the losses, gradients and BatchNorm statistics of the eager step, step after
// step, in float64 with deterministic cuDNN (1e-10), also across a batch of another shape
// (run eagerly into the graph's gradient tensors). Skipped on a machine without CUDA.
#include "models/registry.h"
#include "trainer/graphed_step.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <memory>

namespace {

using dtrain::models::Model;
using dtrain::trainer::GraphedStep;

std::shared_ptr<Model> resnet18(torch::Device device) {
  torch::manual_seed(7);
  dtrain::models::ModelOptions options;
  options.name = "resnet18";
  std::shared_ptr<Model> model = dtrain::models::make_model(options, {3, 16, 16}, 10);
  model->to(device, torch::kFloat64);
  model->train();
  return model;
}

GraphedStep::ForwardBackward forward_backward(Model& model) {
  return [&model](const torch::Tensor& images, const torch::Tensor& labels) {
    torch::Tensor loss = torch::nn::functional::cross_entropy(model.forward(images), labels);
    loss.backward();
    return loss.detach();
  };
}

double max_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

}  // namespace

TEST_CASE("a CUDA graph of forward and backward trains as the eager step (skipped on CPU)",
          "[graphed_step]") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
  const torch::Device cuda(torch::kCUDA, 0);
  std::shared_ptr<Model> eager = resnet18(cuda);
  std::shared_ptr<Model> graphed = resnet18(cuda);
  GraphedStep step(graphed->parameters(), graphed->buffers(), forward_backward(*graphed));
  const auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
  torch::optim::SGD eager_optimizer(eager->parameters(), sgd);
  torch::optim::SGD graphed_optimizer(graphed->parameters(), sgd);

  const int64_t steps = 6, short_step = 3;
  for (int64_t s = 0; s < steps; ++s) {
    INFO("step " << s);
    const int64_t n = s == short_step ? 5 : 8;  // an epoch's short last batch: run eagerly
    torch::manual_seed(100 + s);
    const dtrain::data::Batch batch{
        torch::randn({n, 3, 16, 16}, torch::dtype(torch::kFloat64)).to(cuda),
        torch::randint(10, {n}, torch::dtype(torch::kInt64)).to(cuda)};

    for (torch::Tensor& param : eager->parameters()) param.mutable_grad().reset();
    const torch::Tensor eager_loss = forward_backward(*eager)(batch.images, batch.labels);
    const torch::Tensor graphed_loss = step.run(batch);
    CHECK((eager_loss - graphed_loss).abs().item<double>() < 1e-10);
    std::vector<torch::Tensor> eager_grads, graphed_grads;
    for (const torch::Tensor& param : eager->parameters()) eager_grads.push_back(param.grad());
    for (const torch::Tensor& param : graphed->parameters()) graphed_grads.push_back(param.grad());
    CHECK(max_difference(eager_grads, graphed_grads) < 1e-10);

    eager_optimizer.step();
    graphed_optimizer.step();
    // As the strategies do after their update: the graph's gradients are handed back next run.
    for (torch::Tensor& param : graphed->parameters()) param.mutable_grad().reset();
  }
  CHECK(step.replays() == steps - 1);
  CHECK(step.eager_runs() == 1);
  CHECK(max_difference(eager->parameters(), graphed->parameters()) < 1e-10);
  // The warm-up passes before the capture left BatchNorm's statistics as they were.
  CHECK(max_difference(eager->buffers(), graphed->buffers()) < 1e-10);
}
