// DDP against one process on the whole batch (tests/dist/equivalence.h): N ranks of batch b
// must take exactly the steps one process takes on batch N*b, whatever the bucket size,
// overlap or gradient accumulation. Float64: tolerance 1e-12.
#include "common/error.h"
#include "common/shared_kernels.h"
#include "dist/buckets.h"
#include "dist/ddp/ddp.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#ifdef DTRAIN_NCCL
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

using dtrain::dist::DdpOptions;
using dtrain::dist::DdpStrategy;
using Catch::Matchers::Contains;
using namespace equivalence;

namespace {

struct Trained {
  Net net;
  std::unique_ptr<DdpStrategy> strategy;  // destroyed first: its hooks point into it
};

Trained train_ddp(const Data& data, const DdpOptions& options, int64_t accum,
                  NetOptions net_options = {},
                  const dtrain::optim::OptimizerOptions& sgd = optimizer_options("sgd")) {
  Net net = make_net(static_cast<uint64_t>(world()->rank()), net_options);
  auto strategy = std::make_unique<DdpStrategy>(options, world());
  strategy->attach(*net, factory(sgd));
  train(net, *strategy, data, 0, kSteps, sgd.lr, accum);
  return {net, std::move(strategy)};
}

}  // namespace

TEST_CASE("DDP on N ranks equals one rank on the N-times batch", "[dist][ddp]") {
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, optimizer_options("sgd"));
  DdpOptions options;
  options.bucket_mb = GENERATE(1e-5, 25.0, 1000.0);  // one tensor per bucket, default, one bucket
  options.first_bucket_mb = std::min(1.0, options.bucket_mb);
  options.overlap = GENERATE(true, false);
  const int64_t accum = GENERATE(1, 2);
  CAPTURE(options.bucket_mb, options.overlap, accum);
  Trained trained = train_ddp(data, options, accum);
  CHECK(max_difference(*trained.net, *reference) < kTolerance);
}

// The trainer's train.cuda_graph with DDP (trainer/graphed_step.h), on NCCL ranks: an eager
// warm-up pass (after which the buckets are re-planned), then the pass captured with the
// hooks, bucket copies and all-reduces inside, then every step a replay.
TEST_CASE("DDP's all-reduces captured in a CUDA graph take one rank's steps on each replay",
          "[dist][ddp]") {
  if (!device().is_cuda()) {
    WARN("CPU ranks: a CUDA graph needs NCCL ranks; skipped");
    return;
  }
#ifdef DTRAIN_NCCL
  // Streams and the capture are the current device's: this rank's GPU, as the trainer sets it.
  const c10::cuda::CUDAGuard on_device(device());
  const Data data = make_data(world()->size());
  const auto sgd = optimizer_options("sgd");
  DdpOptions options;
  options.bucket_mb = options.first_bucket_mb = 1e-5;  // one tensor per bucket
  options.overlap = GENERATE(true, false);
  // In bf16 the reference is the same reduction run eagerly: NCCL sums in a fixed order.
  options.reduce_dtype = GENERATE("param", "bf16");
  CAPTURE(options.overlap, options.reduce_dtype);
  Net reference = options.reduce_dtype == "param" ? train_reference(data, sgd)
                                                  : train_ddp(data, options, 1).net;
  const int rank = world()->rank();
  Net net = make_net(static_cast<uint64_t>(rank));
  DdpStrategy strategy(options, world());
  strategy.attach(*net, factory(sgd));

  const auto batch = [&](int64_t step) {
    return std::make_pair(data.x[step].narrow(0, rank * kPerRank, kPerRank),
                          data.y[step].narrow(0, rank * kPerRank, kPerRank));
  };
  torch::Tensor x = batch(0).first.clone(), y = batch(0).second.clone();  // the graph's inputs
  const auto pass = [&] {
    strategy.before_backward(true);
    torch::nn::functional::cross_entropy(net->forward(x), y).backward();
    strategy.after_backward(true);
  };
  const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  std::vector<torch::Tensor> gradients;
  {
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(caller);
    inputs_ready.block(side);
    const c10::cuda::CUDAStreamGuard on_side(side);
    pass();
    strategy.after_graph_pass();
    graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    pass();
    graph.capture_end();
    for (const torch::Tensor& param : net->parameters()) gradients.push_back(param.grad());
    strategy.after_graph_pass();
    at::cuda::CUDAEvent captured;
    captured.record(side);
    captured.block(caller);
  }
  for (int64_t step = 0; step < kSteps; ++step) {
    strategy.before_forward(step);
    x.copy_(batch(step).first);
    y.copy_(batch(step).second);
    graph.replay();
    const std::vector<torch::Tensor> params = net->parameters();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = gradients[i];
    strategy.after_replayed_backward();
    strategy.step(sgd.lr);
  }
  CHECK(max_difference(*net, *reference) < kTolerance);
  // Replayed: counted, not timed.
  const dtrain::dist::Stats stats = strategy.stats();
  CHECK(stat(stats, "comm/collectives") == static_cast<double>(strategy.buckets().size()));
  CHECK_THROWS(stat(stats, "comm/ms"));
#endif
}

// dist.ddp.reduce_dtype = "bf16": one step's gradients are the average over ranks of each
// rank's gradient cast to bf16, summed in bf16 (each partial sum rounded once), and widened.
TEST_CASE("DDP in bf16 averages the ranks' gradients cast to bf16", "[dist][ddp]") {
  auto comm = world();
  const Data data = make_data(comm->size());
  const int rank = comm->rank();
  const torch::Tensor x = data.x[0].narrow(0, rank * kPerRank, kPerRank);
  const torch::Tensor y = data.y[0].narrow(0, rank * kPerRank, kPerRank);

  Net local = make_net(0);  // this rank's own gradient, without the strategy
  torch::nn::functional::cross_entropy(local->forward(x), y).backward();
  DdpOptions options;
  options.reduce_dtype = "bf16";
  Net net = make_net(0);
  DdpStrategy strategy(options, comm);
  strategy.attach(*net, factory(optimizer_options("sgd")));
  strategy.before_forward(0);
  strategy.before_backward(true);
  torch::nn::functional::cross_entropy(net->forward(x), y).backward();
  strategy.after_backward(true);

  const std::vector<torch::Tensor> mine = local->parameters();
  const std::vector<torch::Tensor> reduced = net->parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    CAPTURE(i);
    const torch::Tensor cast = mine[i].grad().to(torch::kBFloat16).to(torch::kFloat64).flatten();
    torch::Tensor all = torch::empty({comm->size() * cast.numel()}, cast.options());
    comm->all_gather(cast, all)->wait();
    const torch::Tensor per_rank = all.view({comm->size(), cast.numel()});
    const torch::Tensor got = reduced[i].grad().flatten();
    // The sum was made in bf16: its result is a bf16 number.
    CHECK(torch::equal(got, got.to(torch::kBFloat16).to(torch::kFloat64)));
    // A rounding (bf16's unit, 2^-8 relative) per partial sum and one for the division: at
    // most the sum of the magnitudes times the unit, in the mean.
    const torch::Tensor bound = per_rank.abs().sum(0) * std::ldexp(1.0, -8);
    CHECK(((got - per_rank.mean(0)).abs() <= bound).all().item<bool>());
    if (comm->size() == 2) {  // one rounded sum, an exact halving
      const torch::Tensor sum = per_rank.sum(0).to(torch::kBFloat16).to(torch::kFloat64);
      CHECK(torch::equal(got, sum / 2.0));
    }
  }
  int64_t numel = 0;
  for (const torch::Tensor& param : reduced) numel += param.numel();
  strategy.step(optimizer_options("sgd").lr);  // ends the step's record
  CHECK(stat(strategy.stats(), "comm/bytes") == static_cast<double>(2 * numel));  // bf16's
}

TEST_CASE("DDP with LARS and LAMB equals one rank", "[dist][ddp]") {
  const std::string name = GENERATE("lars", "lamb");
  INFO("optimizer " << name);
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  DdpStrategy strategy({}, world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr);
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("DDP re-plans buckets from the observed gradient order", "[dist][ddp]") {
  DdpOptions options;
  options.bucket_mb = options.first_bucket_mb = 1e-5;  // one tensor per bucket
  Trained trained = train_ddp(make_data(world()->size()), options, 1);
  // Parameters: 0-1 head, 2-3 body, 4-5 middle. The first guess (reverse registration) puts
  // the middle first and the head last; backward reaches the head first, then the middle.
  const dtrain::dist::BucketPlan plan = trained.strategy->buckets();
  REQUIRE(plan.size() == 6);
  for (size_t b = 0; b < plan.size(); ++b) {
    INFO("bucket " << b);
    REQUIRE(plan[b].size() == 1);
    const int64_t layer = plan[b][0] / 2;  // 0 head, 1 body, 2 middle
    CHECK(layer == (b < 2 ? 0 : b < 4 ? 2 : 1));
  }
  // The last step's communication: one all-reduce per bucket, of every gradient.
  const dtrain::dist::Stats stats = trained.strategy->stats();
  const double n = world()->size();
  const double bytes = ((kHidden + 1) * kClasses + (kIn + 1) * kHidden + (kHidden + 1) * kHidden) * 8;
  CHECK(stat(stats, "comm/collectives") == 6);
  CHECK(stat(stats, "comm/bytes") == bytes);
  CHECK(stat(stats, "comm/sent_bytes") == Approx(bytes * 2 * (n - 1) / n));
  CHECK(stat(stats, "comm/recv_bytes") == Approx(bytes * 2 * (n - 1) / n));
  CHECK(stat(stats, "comm/ms") >= 0.0);
  CHECK(stat(stats, "comm/exposed_ms") >= 0.0);
  CHECK(stat(stats, "comm/exposed_ms") <= stat(stats, "comm/ms") + 1e-9);
}

// dist.ddp.batchnorm_beside_allreduce: under overlap, every bucket launched during backward
// (all but the last) asks for that many GPU-sharing BatchNorm backwards (this net has none to
// take them), and the next backward starts without what was left.
TEST_CASE("DDP asks for shared BatchNorm kernels after each bucket launched in backward",
          "[dist][ddp]") {
  DdpOptions options;
  options.bucket_mb = options.first_bucket_mb = 1e-5;  // one tensor per bucket: 6 buckets
  options.batchnorm_beside_allreduce = 2;
  options.overlap = GENERATE(true, false);
  CAPTURE(options.overlap);
  Trained trained = train_ddp(make_data(world()->size()), options, 1);
  REQUIRE(trained.strategy->buckets().size() == 6);
  int64_t requests = 0;
  while (dtrain::take_shared_kernel_request()) ++requests;
  CHECK(requests == (options.overlap ? 2 * 5 : 0));  // without overlap, all after backward
  dtrain::request_shared_kernels(1);
  trained.strategy->before_backward(/*last_micro_step=*/false);
  CHECK_FALSE(dtrain::take_shared_kernel_request());
}

TEST_CASE("DDP names parameters without gradients, or reduces them with find_unused",
          "[dist][ddp]") {
  const Data data = make_data(world()->size());
  const NetOptions with_unused{true, false};
  // No weight decay: the reference skips a parameter without gradient, DDP steps it with a
  // zero gradient; only decay would tell the two apart.
  auto sgd = optimizer_options("sgd");
  sgd.weight_decay = 0.0;
  DdpOptions options;
  CHECK_THROWS_WITH(train_ddp(data, options, 1, with_unused, sgd),
                    Contains("unused.weight") && Contains("dist.ddp.find_unused"));
  options.find_unused = true;
  Trained trained = train_ddp(data, options, 1, with_unused, sgd);
  Net reference = train_reference(data, sgd, with_unused);
  CHECK(max_difference(*trained.net, *reference) < kTolerance);
}

TEST_CASE("BatchNorm buffers follow dist.ddp.buffers", "[dist][ddp]") {
  auto comm = world();
  const std::string policy = GENERATE("broadcast", "average", "local");
  CAPTURE(policy);
  Net net = make_net(0, {false, true});
  DdpOptions options;
  options.buffers = policy;
  DdpStrategy strategy(options, comm);
  strategy.attach(*net, factory(optimizer_options("sgd")));
  // Different data on every rank: the running statistics drift apart.
  torch::manual_seed(100 + comm->rank());
  net->forward(torch::randn({8, kIn}, torch::kFloat64).to(device()));
  const torch::Tensor local = net->norm->running_mean.clone();
  torch::Tensor all = torch::empty({comm->size() * kHidden}, net->norm->running_mean.options());
  comm->all_gather(local, all)->wait();
  const torch::Tensor per_rank = all.view({comm->size(), kHidden});

  strategy.before_eval();
  const torch::Tensor synced = net->norm->running_mean;
  if (policy == "broadcast") CHECK(torch::equal(synced, per_rank[0]));
  if (policy == "average") CHECK(torch::allclose(synced, per_rank.mean(0), 0.0, 1e-15));
  if (policy == "local") CHECK(torch::equal(synced, local));
}

TEST_CASE("Buckets fill to the cap in readiness order, the first one small", "[dist][ddp]") {
  std::vector<torch::Tensor> params = {torch::zeros({100}), torch::zeros({100}),
                                       torch::zeros({100}), torch::zeros({100}, torch::kFloat64),
                                       torch::zeros({100})};
  // 400 bytes per float32 tensor; the first bucket closes at >= 100 bytes, later ones at 800.
  const dtrain::dist::BucketPlan plan = dtrain::dist::plan_buckets({4, 3, 2, 1, 0}, params, 100, 800);
  const dtrain::dist::BucketPlan expected = {{4}, {3}, {2, 1}, {0}};
  CHECK(plan == expected);  // float64 tensor 3 has its own bucket: one flat tensor per dtype
}

// A parameter used in an earlier micro-step but not in the last one: with find_unused, its
// gradient from the earlier micro-steps is reduced (not zeros), as one rank accumulates it.
TEST_CASE("DDP with find_unused reduces gradients of earlier micro-steps", "[dist][ddp]") {
  auto comm = world();
  const Data data = make_data(comm->size());
  const auto sgd = optimizer_options("sgd");
  // The extra layer joins only micro-step 0: out = net(x) + extra(x)[:, :kClasses].
  auto forward = [](Net& net, torch::nn::Linear& extra, const torch::Tensor& x, bool with_extra) {
    torch::Tensor out = net->forward(x);
    return with_extra ? out + extra(x).narrow(1, 0, kClasses) : out;
  };
  auto make_extra = [] {
    torch::manual_seed(99);
    torch::nn::Linear extra(kIn, kClasses + 1);
    extra->to(device(), torch::kFloat64);
    return extra;
  };
  constexpr int64_t kAccum = 2;
  const int64_t micro = kPerRank / kAccum;

  Net reference = make_net(0);
  torch::nn::Linear reference_extra = make_extra();
  std::vector<torch::Tensor> all = reference->parameters();
  for (const auto& p : reference_extra->parameters()) all.push_back(p);
  auto optimizer = factory(sgd)(all);
  for (int64_t step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    for (int64_t m = 0; m < kAccum; ++m) {
      // Micro-step m of every rank, gathered: the same samples the ranks see.
      std::vector<torch::Tensor> xs, ys;
      for (int r = 0; r < comm->size(); ++r) {
        xs.push_back(data.x[step].narrow(0, r * kPerRank + m * micro, micro));
        ys.push_back(data.y[step].narrow(0, r * kPerRank + m * micro, micro));
      }
      (torch::nn::functional::cross_entropy(
           forward(reference, reference_extra, torch::cat(xs), m == 0), torch::cat(ys)) /
       static_cast<double>(kAccum))
          .backward();
    }
    optimizer->step();
  }

  struct Both : torch::nn::Module {
    Both(Net n, torch::nn::Linear e) : net(register_module("net", n)), extra(register_module("extra", e)) {}
    Net net;
    torch::nn::Linear extra;
  };
  auto both = std::make_shared<Both>(make_net(static_cast<uint64_t>(comm->rank())), make_extra());
  DdpOptions options;
  options.find_unused = true;
  DdpStrategy strategy(options, comm);
  strategy.attach(*both, factory(sgd));
  for (int64_t step = 0; step < kSteps; ++step) {
    strategy.before_forward(step);
    for (int64_t m = 0; m < kAccum; ++m) {
      const int64_t begin = comm->rank() * kPerRank + m * micro;
      strategy.before_backward(m + 1 == kAccum);
      (torch::nn::functional::cross_entropy(
           forward(both->net, both->extra, data.x[step].narrow(0, begin, micro), m == 0),
           data.y[step].narrow(0, begin, micro)) /
       static_cast<double>(kAccum))
          .backward();
      strategy.after_backward(m + 1 == kAccum);
    }
    strategy.step(sgd.lr);
  }
  CHECK(max_difference(*both->net, *reference) < kTolerance);
  CHECK(max_difference(*both->extra, *reference_extra) < kTolerance);
}
