// SyncBatchNorm against BatchNorm on the whole batch: N ranks holding slices of a batch must
// compute what one BatchNorm computes on all of it, forward and backward, and DDP with
// SyncBatchNorm on N ranks of batch b must train exactly as one rank on batch N*b, running
// statistics included. Float64: tolerance 1e-12. On MPI (CPU), or on NCCL with
// DTRAIN_TEST_DEVICE=cuda, where ATen's fused SyncBatchNorm kernels do the arithmetic.
// The function is tested on tensors, against torch::nn's BatchNorm; models::BatchNorm's use of
// it is tested in tests/models/batch_norm_test.cpp.
#include "dist/ddp/ddp.h"
#include "dist/sync_batchnorm.h"

#include "test_device.h"

#include <catch2/catch.hpp>

namespace {

std::shared_ptr<dtrain::dist::Communicator> world() {
  static std::shared_ptr<dtrain::dist::Communicator> communicator =
      dtrain::dist::make_world_communicator(test_device(), 60.0);
  return communicator;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

constexpr int64_t kIn = 5, kHidden = 7, kClasses = 3, kPerRank = 4, kSteps = 3;
constexpr double kMomentum = 0.1, kEps = 1e-5;  // torch::nn's BatchNorm defaults

// The synced layer's own tensors, copied from a reference layer.
struct Layer {
  explicit Layer(torch::nn::BatchNorm2d& reference)
      : weight(reference->weight.detach().clone().requires_grad_(true)),
        bias(reference->bias.detach().clone().requires_grad_(true)),
        running_mean(reference->running_mean.clone()),
        running_var(reference->running_var.clone()) {}
  torch::Tensor weight, bias, running_mean, running_var;
};

// In training, the norm runs `sync` when set, with the BatchNorm1d's tensors, as a
// models::BatchNorm runs its training forward.
struct NetImpl : torch::nn::Module {
  NetImpl() {
    body = register_module("body", torch::nn::Linear(kIn, kHidden));
    norm = register_module("norm", torch::nn::BatchNorm1d(kHidden));
    head = register_module("head", torch::nn::Linear(kHidden, kClasses));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = body(x);
    h = sync ? sync(h, norm->weight, norm->bias, norm->running_mean, norm->running_var, kMomentum,
                    kEps)
             : norm(h);
    return head(torch::tanh(h));
  }
  torch::nn::Linear body{nullptr}, head{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
  dtrain::BatchNormForward sync;
};
TORCH_MODULE(Net);

Net make_net() {
  torch::manual_seed(0);
  Net net;
  net->to(world()->device(), torch::kFloat64);
  return net;
}

auto sgd = [](const std::vector<torch::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
};

}  // namespace

TEST_CASE("SyncBatchNorm on slices equals BatchNorm on the whole batch, forward and backward",
          "[dist][sync_batchnorm]") {
  auto comm = world();
  const int64_t n = comm->size();
  const auto format = GENERATE(torch::MemoryFormat::Contiguous, torch::MemoryFormat::ChannelsLast);
  auto gen = at::detail::createCPUGenerator(7);
  // [N * 3, 4 channels, 2, 5], far from zero mean, where a one-pass variance would cancel.
  const torch::Tensor input = (at::randn({n * 3, 4, 2, 5}, gen, torch::kFloat64) * 3.0 + 10.0)
                                  .to(comm->device())
                                  .contiguous(format);
  const torch::Tensor upstream =
      at::randn(input.sizes(), gen, torch::kFloat64).to(comm->device()).contiguous(format);

  torch::manual_seed(1);
  torch::nn::BatchNorm2d whole(torch::nn::BatchNorm2dOptions(4).momentum(kMomentum).eps(kEps));
  whole->to(comm->device(), torch::kFloat64);
  {
    torch::NoGradGuard no_grad;
    whole->weight.uniform_(0.5, 1.5);
    whole->bias.uniform_(-1.0, 1.0);
  }
  Layer synced(whole);
  const dtrain::BatchNormForward sync = dtrain::dist::sync_batchnorm_forward(comm);

  for (int pass = 0; pass < 2; ++pass) {  // the second pass starts from updated running stats
    const torch::Tensor x_whole = input.clone().requires_grad_(true);
    const torch::Tensor y_whole = whole(x_whole);
    (y_whole * upstream).sum().backward();
    const torch::Tensor x_slice = input.narrow(0, comm->rank() * 3, 3).clone().requires_grad_(true);
    const torch::Tensor y_slice = sync(x_slice, synced.weight, synced.bias, synced.running_mean,
                                       synced.running_var, kMomentum, kEps);
    (y_slice * upstream.narrow(0, comm->rank() * 3, 3)).sum().backward();

    CHECK(max_difference(y_slice, y_whole.narrow(0, comm->rank() * 3, 3)) < 1e-12);
    CHECK(max_difference(x_slice.grad(), x_whole.grad().narrow(0, comm->rank() * 3, 3)) < 1e-12);
    // Parameter gradients are per-rank shares; summed over ranks they are the whole batch's.
    torch::Tensor weight_grad = synced.weight.grad().clone();
    comm->all_reduce(weight_grad, dtrain::dist::ReduceOp::kSum)->wait();
    CHECK(max_difference(weight_grad, whole->weight.grad()) < 1e-12);
    torch::Tensor bias_grad = synced.bias.grad().clone();
    comm->all_reduce(bias_grad, dtrain::dist::ReduceOp::kSum)->wait();
    CHECK(max_difference(bias_grad, whole->bias.grad()) < 1e-12);
    CHECK(max_difference(synced.running_mean, whole->running_mean) < 1e-12);
    CHECK(max_difference(synced.running_var, whole->running_var) < 1e-12);
    whole->zero_grad();
    synced.weight.mutable_grad().reset();
    synced.bias.mutable_grad().reset();
  }
}

// As under bf16 autocast: bf16 activations, fp32 parameters and statistics.
TEST_CASE("SyncBatchNorm on bf16 slices matches fp32 BatchNorm on the whole batch",
          "[dist][sync_batchnorm]") {
  auto comm = world();
  const int64_t n = comm->size();
  auto gen = at::detail::createCPUGenerator(11);
  const torch::Tensor input =
      (at::randn({n * 4, 6, 3, 3}, gen, torch::kFloat32) * 2.0 + 5.0).to(torch::kBFloat16);
  const torch::Tensor upstream = at::randn(input.sizes(), gen, torch::kFloat32);

  torch::nn::BatchNorm2d whole(torch::nn::BatchNorm2dOptions(6).momentum(kMomentum).eps(kEps));
  whole->to(comm->device());
  Layer synced(whole);

  const torch::Tensor x_whole = input.to(comm->device(), torch::kFloat32).requires_grad_(true);
  const torch::Tensor y_whole = whole(x_whole);
  (y_whole * upstream.to(comm->device())).sum().backward();
  const torch::Tensor x_slice =
      input.narrow(0, comm->rank() * 4, 4).to(comm->device()).requires_grad_(true);
  const torch::Tensor y_slice =
      dtrain::dist::sync_batchnorm_forward(comm)(x_slice, synced.weight, synced.bias,
                                                 synced.running_mean, synced.running_var,
                                                 kMomentum, kEps);
  (y_slice.to(torch::kFloat32) * upstream.narrow(0, comm->rank() * 4, 4).to(comm->device()))
      .sum()
      .backward();

  REQUIRE(y_slice.scalar_type() == torch::kBFloat16);
  REQUIRE(x_slice.grad().scalar_type() == torch::kBFloat16);
  // bf16 keeps 8 significant bits: outputs and gradients below 4 round by less than 2^-6.
  CHECK(max_difference(y_slice.to(torch::kFloat32),
                       y_whole.narrow(0, comm->rank() * 4, 4).detach()) < 1.0 / 32);
  CHECK(max_difference(x_slice.grad().to(torch::kFloat32),
                       x_whole.grad().narrow(0, comm->rank() * 4, 4)) < 1.0 / 32);
  CHECK(max_difference(synced.running_mean, whole->running_mean) < 1e-5);
  CHECK(max_difference(synced.running_var, whole->running_var) < 1e-5);
}

TEST_CASE("DDP with SyncBatchNorm on N ranks trains as one rank on the N-times batch",
          "[dist][sync_batchnorm]") {
  auto comm = world();
  const int64_t n = comm->size();
  auto gen = at::detail::createCPUGenerator(1234);
  const torch::Tensor x =
      at::randn({kSteps, n * kPerRank, kIn}, gen, torch::kFloat64).to(comm->device());
  const torch::Tensor y =
      at::randint(kClasses, {kSteps, n * kPerRank}, gen, torch::kInt64).to(comm->device());

  Net reference = make_net();
  auto optimizer = sgd(reference->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(reference->forward(x[step]), y[step]).backward();
    optimizer->step();
  }

  Net net = make_net();
  net->sync = dtrain::dist::sync_batchnorm_forward(comm);
  dtrain::dist::DdpStrategy strategy({}, comm);
  strategy.attach(*net, sgd);
  for (int64_t step = 0; step < kSteps; ++step) {
    strategy.before_forward(step);
    strategy.before_backward(true);
    const int64_t begin = comm->rank() * kPerRank;
    torch::nn::functional::cross_entropy(net->forward(x[step].narrow(0, begin, kPerRank)),
                                         y[step].narrow(0, begin, kPerRank))
        .backward();
    strategy.after_backward(true);
    strategy.step(0.1);
  }
  const auto trained = net->parameters(), expected = reference->parameters();
  for (size_t i = 0; i < trained.size(); ++i) {
    CHECK(max_difference(trained[i], expected[i]) < 1e-12);
  }
  CHECK(max_difference(net->norm->running_mean, reference->norm->running_mean) < 1e-12);
  CHECK(max_difference(net->norm->running_var, reference->norm->running_var) < 1e-12);
}
