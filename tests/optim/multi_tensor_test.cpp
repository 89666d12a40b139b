// add_scaled_ and lars_update_ against per-tensor float64 arithmetic, over tensor lists that
// cross every boundary of the CUDA kernels' launches: more tensors than one launch takes, a
// tensor of more chunks than one launch covers, empty tensors, channels-last tensors, and a
// tuple whose layouts differ (which must fall back to ATen). Under DTRAIN_TEST_DEVICE=cuda the
// kernels run; on the CPU the ATen path does.
#include "golden.h"
#include "optim/multi_tensor.h"

#include <catch2/catch.hpp>

namespace {

struct Lists {
  std::vector<torch::Tensor> a, b, c;
  torch::Tensor factors;
};

// 70 small tensors, a large one, an empty one, a channels-last one. Where the kernels run,
// the large one spans more chunks (65536 elements) than a launch takes (192); the ATen path
// needs no such size, and the CPU in CI is slow at it.
Lists make_lists(torch::ScalarType dtype) {
  torch::manual_seed(7);
  const torch::Device device = golden::device();
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 0; i < 70; ++i) shapes.push_back({i % 5 + 1, 3 * i + 1});
  const int64_t chunks = dtrain::optim::has_multi_tensor_kernels(device) ? 192 : 3;
  shapes.push_back({chunks * 65536 + 777});
  shapes.push_back({0, 4});
  shapes.push_back({8, 3, 5, 5});
  Lists lists;
  for (const auto& shape : shapes) {
    for (auto* list : {&lists.a, &lists.b, &lists.c}) {
      torch::Tensor t = torch::randn(shape, options);
      if (shape.size() == 4) t = t.contiguous(torch::MemoryFormat::ChannelsLast);
      list->push_back(t);
    }
  }
  lists.factors = torch::rand({static_cast<int64_t>(shapes.size())}, options) + 0.5;
  return lists;
}

std::vector<torch::Tensor> to_double(const std::vector<torch::Tensor>& list) {
  std::vector<torch::Tensor> copies;
  for (const auto& t : list) copies.push_back(t.to(torch::kCPU, torch::kFloat64));
  return copies;
}

void check_close(const std::vector<torch::Tensor>& actual,
                 const std::vector<torch::Tensor>& expected, double tolerance) {
  for (size_t i = 0; i < actual.size(); ++i) {
    INFO("tensor " << i << ", " << actual[i].scalar_type());
    CHECK(torch::allclose(actual[i].to(torch::kCPU, torch::kFloat64), expected[i], tolerance,
                          tolerance));
  }
}

double tolerance_of(torch::ScalarType dtype) {
  return dtype == torch::kFloat64 ? 1e-14 : dtype == torch::kFloat32 ? 1e-6 : 2e-2;
}

}  // namespace

TEST_CASE("add_scaled_ adds alpha * factor_i * source_i to each target",
          "[optim][multi_tensor]") {
  if (golden::device().is_cuda()) CHECK(dtrain::optim::has_multi_tensor_kernels(golden::device()));
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  Lists lists = make_lists(dtype);
  const bool mixed_layouts = GENERATE(false, true);
  if (mixed_layouts) lists.b.back() = lists.b.back().contiguous();  // kernels must decline
  const auto targets = to_double(lists.a);
  const auto sources = to_double(lists.b);
  const auto factors = lists.factors.to(torch::kCPU, torch::kFloat64);
  std::vector<torch::Tensor> expected;
  for (size_t i = 0; i < targets.size(); ++i) {
    expected.push_back(targets[i] - 0.3 * factors[static_cast<int64_t>(i)] * sources[i]);
  }
  dtrain::optim::add_scaled_(lists.a, lists.b, lists.factors, -0.3);
  check_close(lists.a, expected, tolerance_of(dtype));
}

TEST_CASE("lars_update_ applies the LARS step with and without momentum",
          "[optim][multi_tensor]") {
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  const double momentum = GENERATE(0.0, 0.9);
  const double weight_decay = GENERATE(0.0, 1e-2);
  Lists lists = make_lists(dtype);
  const auto w = to_double(lists.a);
  const auto g = to_double(lists.b);
  const auto v = to_double(lists.c);
  const auto f = lists.factors.to(torch::kCPU, torch::kFloat64);
  std::vector<torch::Tensor> expected_w, expected_v;
  for (size_t i = 0; i < w.size(); ++i) {
    const auto step = f[static_cast<int64_t>(i)] * (g[i] + weight_decay * w[i]);
    expected_v.push_back(momentum * v[i] + step);
    expected_w.push_back(w[i] - (momentum != 0.0 ? expected_v.back() : step));
  }
  const std::vector<torch::Tensor> no_buffers;
  dtrain::optim::lars_update_(lists.a, lists.b, momentum != 0.0 ? lists.c : no_buffers,
                              lists.factors, weight_decay, momentum);
  check_close(lists.a, expected_w, tolerance_of(dtype));
  if (momentum != 0.0) check_close(lists.c, expected_v, tolerance_of(dtype));
}
