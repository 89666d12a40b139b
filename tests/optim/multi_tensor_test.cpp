// copy_ against ATen's copies, and add_scaled_, lars_update_, lamb_directions and
// squared_norms against per-tensor float64 arithmetic, over tensor lists that cross every
// boundary of the CUDA kernels' launches: more tensors than one launch takes, a tensor of more
// chunks than one launch covers, empty tensors, channels-last tensors (a 1x1 one whose strides
// differ on its size-1 dimensions, which the kernels take), and a tuple whose layouts differ
// (which must fall back to ATen). Under DTRAIN_TEST_DEVICE=cuda the kernels run; on the CPU the
// ATen path does.
#include "golden.h"
#include "optim/multi_tensor.h"

#include <catch2/catch.hpp>

namespace {

struct Lists {
  std::vector<torch::Tensor> a, b, c, d;
  torch::Tensor factors;
};

// `t` [n, c, 1, 1] with the strides a channels_last kernel gives it: (c, 1, c, c).
torch::Tensor channels_last_strided(const torch::Tensor& t) {
  const int64_t c = t.size(1);
  return torch::empty_strided(t.sizes(), {c, 1, c, c}, t.options()).copy_(t);
}

// 140 small tensors (more than a launch takes: 128), a large one, an empty one, a channels-last
// one. Where the kernels run, the large float32 one spans more chunks (65536 elements) than a
// launch takes (1024); the ATen path needs no such size, and the CPU in CI is slow at it.
Lists make_lists(torch::ScalarType dtype) {
  torch::manual_seed(7);
  const torch::Device device = golden::device();
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  std::vector<std::vector<int64_t>> shapes;
  for (int i = 0; i < 140; ++i) shapes.push_back({i % 5 + 1, 3 * i + 1});
  const bool launch_boundaries = dtrain::optim::has_multi_tensor_kernels(device) &&
                                 dtype == torch::kFloat32;  // one dtype suffices, and is quicker
  const int64_t chunks = launch_boundaries ? 1024 : 3;
  shapes.push_back({chunks * 65536 + 777});
  shapes.push_back({0, 4});
  shapes.push_back({8, 3, 5, 5});
  shapes.push_back({8, 3, 1, 1});  // a 1x1 convolution's weight
  Lists lists;
  for (const auto& shape : shapes) {
    for (auto* list : {&lists.a, &lists.b, &lists.c, &lists.d}) {
      torch::Tensor t = torch::randn(shape, options);
      if (shape.size() == 4) t = t.contiguous(torch::MemoryFormat::ChannelsLast);
      // The 1x1 weight is contiguous as it is, so channels_last leaves it be; its second list
      // holds it as cuDNN's channels_last gradient: strides (3, 1, 3, 3) for (3, 1, 1, 1).
      if (list == &lists.b && shape.size() == 4 && shape.back() == 1) t = channels_last_strided(t);
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
    const auto difference = (actual[i].to(torch::kCPU, torch::kFloat64) - expected[i]).abs();
    INFO("tensor " << i << ", " << actual[i].scalar_type() << ", max |difference| "
                   << (difference.numel() ? difference.max().item<double>() : 0.0));
    CHECK(torch::allclose(actual[i].to(torch::kCPU, torch::kFloat64), expected[i], tolerance,
                          tolerance));
  }
}

double tolerance_of(torch::ScalarType dtype) {
  // bf16: the ATen path rounds each intermediate (up to 2^-8 each), the kernels only the result.
  return dtype == torch::kFloat64 ? 1e-14 : dtype == torch::kFloat32 ? 1e-6 : 6e-2;
}

}  // namespace

TEST_CASE("copy_ casts each source into its target as ATen's copy does", "[optim][multi_tensor]") {
  const auto source_dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const auto target_dtype = GENERATE(torch::kFloat32, torch::kBFloat16);
  const bool mixed_layouts = GENERATE(false, true);
  CAPTURE(source_dtype, target_dtype, mixed_layouts);
  Lists lists = make_lists(source_dtype);
  std::vector<torch::Tensor> targets;
  for (const auto& t : lists.a) targets.push_back(t.to(target_dtype));  // strides kept
  if (mixed_layouts) targets.end()[-2] = targets.end()[-2].contiguous();  // the kernel declines
  dtrain::optim::copy_(targets, lists.b);
  for (size_t i = 0; i < targets.size(); ++i) {
    INFO("tensor " << i);
    CHECK(torch::equal(targets[i].cpu(), lists.b[i].to(target_dtype).cpu()));
  }
}

TEST_CASE("add_scaled_ adds alpha * factor_i * source_i to each target",
          "[optim][multi_tensor]") {
  if (golden::device().is_cuda()) CHECK(dtrain::optim::has_multi_tensor_kernels(golden::device()));
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  Lists lists = make_lists(dtype);
  const bool mixed_layouts = GENERATE(false, true);
  // The 5x5 channels-last tensor made contiguous in one list: the kernels must decline.
  if (mixed_layouts) lists.b.end()[-2] = lists.b.end()[-2].contiguous();
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

TEST_CASE("lamb_directions updates the moments and returns the Adam direction plus decay",
          "[optim][multi_tensor]") {
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  const bool clip = GENERATE(false, true);
  const bool equal_steps = GENERATE(true, false);  // unequal: the ATen path
  Lists lists = make_lists(dtype);
  for (auto& v : lists.d) v.abs_();
  const dtrain::optim::LambDirectionArgs args{0.9, 0.99, 1e-6, 1e-2};
  std::vector<int64_t> steps(lists.a.size(), 3);
  if (!equal_steps) steps[1] = 5;
  const torch::Tensor clip_factor =
      clip ? torch::full({}, 0.7, lists.a.front().options()) : torch::Tensor();

  const auto w = to_double(lists.a);
  const auto g = to_double(lists.b);
  const auto m = to_double(lists.c);
  const auto v = to_double(lists.d);
  std::vector<torch::Tensor> expected_m, expected_v, expected_u;
  for (size_t i = 0; i < w.size(); ++i) {
    const auto t = static_cast<double>(steps[i]);
    const auto clipped = (clip ? 0.7 : 1.0) * g[i];
    expected_m.push_back(args.beta1 * m[i] + (1 - args.beta1) * clipped);
    expected_v.push_back(args.beta2 * v[i] + (1 - args.beta2) * clipped * clipped);
    const double bias1 = 1 - std::pow(args.beta1, t);
    const double sqrt_bias2 = std::sqrt(1 - std::pow(args.beta2, t));
    expected_u.push_back(expected_m.back() / bias1 /
                             (expected_v.back().sqrt() / sqrt_bias2 + args.eps) +
                         args.weight_decay * w[i]);
  }
  const auto updates =
      dtrain::optim::lamb_directions(lists.a, lists.b, lists.c, lists.d, steps, clip_factor, args);
  check_close(lists.c, expected_m, tolerance_of(dtype));
  check_close(lists.d, expected_v, tolerance_of(dtype));
  check_close(updates, expected_u, tolerance_of(dtype));
  CHECK(updates.end()[-2].is_contiguous(torch::MemoryFormat::ChannelsLast));  // the 5x5
}

TEST_CASE("squared_norms sums each tensor's squares, of one list or of two, the same each run",
          "[optim][multi_tensor]") {
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  Lists lists = make_lists(dtype);
  // More tensors than the kernels' summing pass takes in one launch (1024).
  const auto options = lists.a.front().options();
  for (int i = 0; i < 1000; ++i) {
    lists.a.push_back(torch::randn({i % 7 + 1}, options));
    lists.b.push_back(torch::randn({i % 7 + 1}, options));
  }
  const auto n = static_cast<int64_t>(lists.a.size());
  const torch::Tensor two = dtrain::optim::squared_norms(lists.a, &lists.b);
  const torch::Tensor one = dtrain::optim::squared_norms(lists.b);
  REQUIRE(two.sizes() == torch::IntArrayRef({2, n}));
  REQUIRE(one.sizes() == torch::IntArrayRef({1, n}));
  CHECK(torch::equal(two, dtrain::optim::squared_norms(lists.a, &lists.b)));

  const auto a = to_double(lists.a);
  const auto b = to_double(lists.b);
  const torch::Tensor actual = two.to(torch::kCPU, torch::kFloat64);
  const torch::Tensor actual_one = one.to(torch::kCPU, torch::kFloat64);
  // Relative: the large tensor's sum is ~2e7. bf16: the ATen path rounds the norm to 2^-8.
  const double tolerance =
      dtype == torch::kFloat64 ? 1e-12 : dtype == torch::kFloat32 ? 1e-5 : 2e-2;
  for (int64_t i = 0; i < n; ++i) {
    const double expected_a = a[i].square().sum().item<double>();
    const double expected_b = b[i].square().sum().item<double>();
    INFO("tensor " << i << " of " << a[i].numel() << " elements");
    CHECK(actual[0][i].item<double>() == Approx(expected_a).epsilon(tolerance).margin(1e-30));
    CHECK(actual[1][i].item<double>() == Approx(expected_b).epsilon(tolerance).margin(1e-30));
    CHECK(actual_one[0][i].item<double>() == Approx(expected_b).epsilon(tolerance).margin(1e-30));
  }
}

TEST_CASE("same_dense_layout compares strides on the dimensions longer than one only",
          "[optim][multi_tensor]") {
  using dtrain::optim::same_dense_layout;
  const torch::Tensor plain_1x1 = torch::randn({8, 3, 1, 1});
  const torch::Tensor channels_last_1x1 = channels_last_strided(plain_1x1);
  REQUIRE(plain_1x1.strides() != channels_last_1x1.strides());  // (3, 1, 1, 1), (3, 1, 3, 3)
  CHECK(same_dense_layout(plain_1x1, channels_last_1x1));
  CHECK(torch::equal(plain_1x1, channels_last_1x1));
  const torch::Tensor conv = torch::randn({8, 3, 3, 3});
  CHECK(same_dense_layout(conv, conv.clone()));
  CHECK_FALSE(same_dense_layout(conv, conv.contiguous(torch::MemoryFormat::ChannelsLast)));
  CHECK_FALSE(same_dense_layout(conv, conv.reshape({8, 27})));
  CHECK_FALSE(same_dense_layout(conv, torch::randn({8, 3, 3, 6}).narrow(3, 0, 3)));  // gaps
}

TEST_CASE("sgd_update_ is torch::optim::SGD's step with momentum buffers",
          "[optim][multi_tensor]") {
  const auto dtype = GENERATE(torch::kFloat64, torch::kFloat32, torch::kBFloat16);
  const bool nesterov = GENERATE(false, true);
  const double dampening = nesterov ? 0.0 : 0.25;  // PyTorch's nesterov needs dampening 0
  Lists lists = make_lists(dtype);
  const bool mixed_layouts = GENERATE(false, true);
  // The 5x5 channels-last tensor made contiguous in one list: the kernels must decline.
  if (mixed_layouts) lists.b.end()[-2] = lists.b.end()[-2].contiguous();
  const dtrain::optim::SgdArgs args{0.05, 1e-2, 0.9, dampening, nesterov};

  const auto w = to_double(lists.a);
  const auto g = to_double(lists.b);
  const auto b = to_double(lists.c);
  std::vector<torch::Tensor> expected_w, expected_b;
  for (size_t i = 0; i < w.size(); ++i) {
    const auto d = g[i] + args.weight_decay * w[i];
    expected_b.push_back(args.momentum * b[i] + (1 - args.dampening) * d);
    const auto step = nesterov ? d + args.momentum * expected_b.back() : expected_b.back();
    expected_w.push_back(w[i] - args.lr * step);
  }
  dtrain::optim::sgd_update_(lists.a, lists.b, lists.c, args);
  check_close(lists.a, expected_w, tolerance_of(dtype));
  check_close(lists.c, expected_b, tolerance_of(dtype));
}
