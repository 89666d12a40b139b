// ForeachSGD must be torch::optim::SGD, bit for bit on the CPU (within rounding where CUDA's
// fused pass runs, DTRAIN_TEST_DEVICE=cuda), with interchangeable state.
#include "golden.h"
#include "optim/foreach_sgd.h"

#include <catch2/catch.hpp>

#include <vector>

namespace {

std::vector<torch::Tensor> make_params() {
  torch::manual_seed(3);
  return {torch::randn({4, 3}).requires_grad_(true), torch::randn({5}).requires_grad_(true),
          torch::randn({2, 2, 3}).requires_grad_(true)};
}

std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(true));
  return copies;
}

// A loss whose gradients change with the parameters, so momentum matters.
void backward(const std::vector<torch::Tensor>& params, int step) {
  torch::Tensor loss = torch::zeros({});
  for (size_t i = 0; i < params.size(); ++i) {
    loss = loss + (params[i] * params[i]).sum() * (0.5 + static_cast<double>(i + step) / 7.0) +
           params[i].sin().sum();
  }
  loss.backward();
}

template <typename Optimizer>
std::unique_ptr<torch::optim::Optimizer> make(const std::vector<torch::Tensor>& params,
                                              const torch::optim::SGDOptions& options) {
  // Two groups, the second without weight decay, as make_optimizer builds them.
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{params[0], params[2]},
                      std::make_unique<torch::optim::SGDOptions>(options));
  auto no_decay = options;
  no_decay.weight_decay(0.0);
  groups.emplace_back(std::vector<torch::Tensor>{params[1]},
                      std::make_unique<torch::optim::SGDOptions>(no_decay));
  return std::make_unique<Optimizer>(std::move(groups), options);
}

// Steps `first` .. `end - 1` of both optimizers, each on its own parameters, the same loss.
void step_both(torch::optim::Optimizer& ours, const std::vector<torch::Tensor>& our_params,
               torch::optim::Optimizer& reference,
               const std::vector<torch::Tensor>& reference_params, int first, int end) {
  for (int step = first; step < end; ++step) {
    ours.zero_grad();
    reference.zero_grad();
    backward(our_params, step);
    backward(reference_params, step);
    ours.step();
    reference.step();
  }
}

void check_identical(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) CHECK(torch::equal(a[i], b[i]));
}

}  // namespace

TEST_CASE("ForeachSGD equals torch::optim::SGD bitwise", "[optim][sgd]") {
  const bool nesterov = GENERATE(false, true);
  const double momentum = nesterov ? 0.9 : GENERATE(0.0, 0.9);
  const auto options =
      torch::optim::SGDOptions(0.05).momentum(momentum).weight_decay(1e-2).nesterov(nesterov);
  auto ours = make_params();
  auto reference = clone_params(ours);
  auto foreach_sgd = make<dtrain::optim::ForeachSGD>(ours, options);
  auto torch_sgd = make<torch::optim::SGD>(reference, options);
  step_both(*foreach_sgd, ours, *torch_sgd, reference, 0, 5);
  check_identical(ours, reference);
}

TEST_CASE("ForeachSGD state loads into torch::optim::SGD and back", "[optim][sgd]") {
  const auto options = torch::optim::SGDOptions(0.1).momentum(0.9).weight_decay(5e-4);
  auto ours = make_params();
  auto reference = clone_params(ours);
  auto foreach_sgd = make<dtrain::optim::ForeachSGD>(ours, options);
  for (int step = 0; step < 3; ++step) {
    foreach_sgd->zero_grad();
    backward(ours, step);
    foreach_sgd->step();
  }
  // Hand the state over to torch's SGD on a copy of the weights; both continue identically.
  torch::serialize::OutputArchive saved;
  foreach_sgd->save(saved);
  std::stringstream bytes;
  saved.save_to(bytes);
  for (size_t i = 0; i < ours.size(); ++i) {
    torch::NoGradGuard no_grad;
    reference[i].copy_(ours[i]);
  }
  auto torch_sgd = make<torch::optim::SGD>(reference, options);
  torch::serialize::InputArchive loaded;
  loaded.load_from(bytes);
  torch_sgd->load(loaded);
  step_both(*foreach_sgd, ours, *torch_sgd, reference, 3, 6);
  check_identical(ours, reference);
}

TEST_CASE("ForeachSGD on the test device stays within rounding of torch::optim::SGD",
          "[optim][sgd]") {
  const bool nesterov = GENERATE(false, true);
  const auto options =
      torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2).nesterov(nesterov);
  std::vector<torch::Tensor> ours;
  for (const auto& p : make_params()) {
    ours.push_back(p.detach().to(golden::device()).requires_grad_(true));
  }
  auto reference = clone_params(ours);
  auto foreach_sgd = make<dtrain::optim::ForeachSGD>(ours, options);
  auto torch_sgd = make<torch::optim::SGD>(reference, options);
  // Step 0 makes the buffers; the fused pass follows.
  step_both(*foreach_sgd, ours, *torch_sgd, reference, 0, 5);
  for (size_t i = 0; i < ours.size(); ++i) {
    CHECK(torch::allclose(ours[i], reference[i], 1e-6, 1e-6));
  }
}
