// Every codec through the gradient reducer's path, as DDP runs it (a CodecHook wrapping a
// plain all-reduce hook), on N ranks, float64:
//   - what the reducer leaves is the average of the ranks' decoded messages: with error
//     feedback, rank i sent g_i + e_i(before) - e_i(after), so N x result = the sum of those
//     over ranks, to rounding, at every step (which is also the bookkeeping: over T steps
//     sent + residual = the sum of the gradients);
//   - the warm-up steps are plain averages; PowerSGD is exact on gradients of rank <= r;
//   - fp16/bf16 stay finite and accurate on gradients far beyond fp16's range.
#include "dist/compression/codec_hook.h"

#include "codec_test_helpers.h"
#include "equivalence.h"

#include <catch2/catch.hpp>

using namespace dtrain::dist;
using namespace dtrain::dist::compression;
using equivalence::device;
using equivalence::world;
using codec_test::max_abs;
using codec_test::summed;

namespace {

// The wrapped hook: DDP's plain all-reduce.
class AverageHook : public CommHook {
 public:
  std::unique_ptr<Work> launch(Bucket& bucket) override {
    return world()->all_reduce(bucket.flat, ReduceOp::kAverage);
  }
  Collective collective() const override { return Collective::kAllReduce; }
};

// Parameters of every kind PowerSGD meets: matrices it compresses at rank 2 (a linear
// weight, a conv weight), a bias, and a matrix too thin to gain ([3, 2]); two buckets.
struct Setup {
  std::vector<torch::Tensor> params;
  AverageHook plain;
  std::unique_ptr<CodecHook> hook;
  std::unique_ptr<GradientReducer> reducer;

  explicit Setup(const CompressionOptions& options) {
    for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
             {12, 10}, {12}, {5, 3, 2, 2}, {3, 2}}) {
      params.push_back(torch::zeros(shape, torch::TensorOptions(torch::kFloat64)
                                               .device(device()).requires_grad(true)));
    }
    hook = std::make_unique<CodecHook>(plain, make_codec(options, world(), params), world(),
                                       options.warmup_steps);
    const Layout layout = packed_layout({{0, 1}, {2, 3}}, params);
    reducer = std::make_unique<GradientReducer>(
        params, std::vector<std::string>{"w", "b", "c", "t"}, world(), *hook, ReducerOptions(),
        layout);
  }

  // One step whose gradients are `grads`; returns what the reducer left in each gradient.
  std::vector<torch::Tensor> step(int64_t step, const std::vector<torch::Tensor>& grads) {
    hook->begin_step(step);
    reducer->before_backward(true);
    torch::Tensor loss = torch::zeros({}, grads[0].options());
    for (size_t i = 0; i < params.size(); ++i) loss = loss + (params[i] * grads[i]).sum();
    loss.backward();
    StepComm record(world()->rank(), world()->size());
    reducer->after_backward(true, record);
    std::vector<torch::Tensor> result;
    for (const torch::Tensor& param : params) result.push_back(param.grad().clone());
    reducer->after_step();
    hook->end_step(reducer->buckets());
    return result;
  }

  // This rank's residual of each parameter (zeros where there is none yet).
  std::vector<torch::Tensor> residuals() const {
    const CodecState state = hook->codec().state();
    std::vector<torch::Tensor> result;
    for (size_t i = 0; i < params.size(); ++i) {
      const bool kept = !state.slots.empty() && state.slots[0].count(static_cast<int64_t>(i));
      result.push_back(kept ? state.slots[0].at(static_cast<int64_t>(i)).view(params[i].sizes())
                            : torch::zeros_like(params[i]).detach());
    }
    return result;
  }
};

std::vector<torch::Tensor> random_grads(const Setup& setup, int64_t step, double scale = 1.0) {
  auto generator = at::detail::createCPUGenerator(1000 * (world()->rank() + 1) + step);
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : setup.params) {
    grads.push_back((at::randn(param.sizes(), generator, torch::kFloat64) * scale).to(device()));
  }
  return grads;
}

}  // namespace

TEST_CASE("the reducer leaves the average of every rank's decoded message", "[codec]") {
  CompressionOptions options;
  options.kind = GENERATE("topk", "powersgd", "onebit");
  options.ratio = 0.1;
  options.rank = 2;
  options.chunk = 16;
  options.warmup_steps = 1;
  INFO("codec " << options.kind);
  Setup setup(options);
  const double n = world()->size();
  for (int64_t step = 0; step < 4; ++step) {
    INFO("step " << step);
    const std::vector<torch::Tensor> grads = random_grads(setup, step);
    const std::vector<torch::Tensor> before = setup.residuals();
    const std::vector<torch::Tensor> result = setup.step(step, grads);
    const std::vector<torch::Tensor> after = setup.residuals();
    for (size_t i = 0; i < grads.size(); ++i) {
      INFO("parameter " << i);
      const torch::Tensor sent = summed(grads[i] + before[i] - after[i]);
      CHECK(max_abs(result[i] * n - sent) < 1e-12);
      if (step == 0) CHECK(max_abs(result[i] * n - summed(grads[i].clone())) < 1e-12);
    }
    // Compressed steps leave something unsent (a bias is exact under PowerSGD).
    if (step > 0) CHECK(max_abs(after[0]) > 0);
  }
}

TEST_CASE("PowerSGD is exact on gradients of rank <= r", "[codec]") {
  CompressionOptions options;
  options.kind = "powersgd";
  options.rank = 2;
  Setup setup(options);
  // Every rank's matrices share a column space of dimension 2: so does their sum.
  std::vector<torch::Tensor> grads = random_grads(setup, 0);
  auto shared = at::detail::createCPUGenerator(7);
  for (const size_t i : {size_t{0}, size_t{2}}) {
    const int64_t rows = grads[i].size(0), cols = grads[i].numel() / rows;
    const torch::Tensor u = at::randn({rows, 2}, shared, torch::kFloat64).to(device());
    grads[i] = u.mm(grads[i].view({-1}).narrow(0, 0, 2 * cols).view({2, cols}))
                   .view(grads[i].sizes());
  }
  const std::vector<torch::Tensor> result = setup.step(0, grads);
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs(result[i] * world()->size() - summed(grads[i].clone())) < 1e-10);
  }
}

TEST_CASE("fp16 and bf16 stay finite on gradients beyond fp16's range", "[codec]") {
  CompressionOptions options;
  options.kind = GENERATE("fp16", "bf16");
  const double scale = GENERATE(1e30, 1.0, 1e-12);
  INFO("codec " << options.kind << ", gradients of magnitude " << scale);
  Setup setup(options);
  const std::vector<torch::Tensor> grads = random_grads(setup, 0, scale);
  const std::vector<torch::Tensor> result = setup.step(0, grads);
  const double tolerance = options.kind == "fp16" ? 2e-3 : 2e-2;  // 11 and 8 bits, relative
  for (size_t i = 0; i < grads.size(); ++i) {
    INFO("parameter " << i);
    const torch::Tensor mean = summed(grads[i].clone()) / world()->size();
    CHECK(torch::isfinite(result[i]).all().item<bool>());
    CHECK(max_abs(result[i] - mean) <= tolerance * max_abs(mean) * world()->size());
  }
}

TEST_CASE("topk with momentum correction and nothing left out is the plain average",
          "[codec]") {
  // Everything sent: the residual is zero, so momentum factor masking clears the whole
  // velocity each step and the velocity is the step's gradient.
  CompressionOptions options;
  options.kind = "topk";
  options.ratio = 1.0;
  options.momentum = 0.9;
  Setup setup(options);
  for (int64_t step = 0; step < 3; ++step) {
    const std::vector<torch::Tensor> grads = random_grads(setup, step);
    const std::vector<torch::Tensor> result = setup.step(step, grads);
    for (size_t i = 0; i < grads.size(); ++i) {
      CHECK(max_abs(result[i] * world()->size() - summed(grads[i].clone())) < 1e-12);
    }
  }
}
