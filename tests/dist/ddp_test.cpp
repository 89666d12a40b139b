// DDP against one rank on the whole batch: N ranks of batch b must take exactly the steps that
// one rank takes on batch N*b, whatever the bucket size, overlap or gradient accumulation.
// Float64, so the only difference is summation order: tolerance 1e-12.
#include "common/error.h"
#include "dist/buckets.h"
#include "dist/ddp.h"

#include "mpi_world.h"

#include <catch2/catch.hpp>

using dtrain::dist::DdpOptions;
using dtrain::dist::DdpStrategy;
using Catch::Matchers::Contains;

namespace {

std::shared_ptr<dtrain::dist::Communicator> world() { return mpi_world(); }

constexpr int64_t kIn = 6, kHidden = 10, kClasses = 3, kPerRank = 4, kSteps = 3;

// The head is registered before the body, so backward's gradient order differs from the
// reversed registration order (the bucket plan's first guess) and the re-plan is exercised.
// `unused` takes part in no forward. `norm` adds BatchNorm buffers.
struct NetImpl : torch::nn::Module {
  NetImpl(bool with_unused, bool with_norm) {
    head = register_module("head", torch::nn::Linear(kHidden, kClasses));
    body = register_module("body", torch::nn::Linear(kIn, kHidden));
    if (with_unused) unused = register_module("unused", torch::nn::Linear(2, 2));
    if (with_norm) norm = register_module("norm", torch::nn::BatchNorm1d(kHidden));
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor h = body(x);
    if (norm) h = norm(h);
    return head(torch::tanh(h));
  }
  torch::nn::Linear head{nullptr}, body{nullptr}, unused{nullptr};
  torch::nn::BatchNorm1d norm{nullptr};
};
TORCH_MODULE(Net);

Net make_net(uint64_t seed, bool with_unused = false, bool with_norm = false) {
  torch::manual_seed(seed);
  Net net(with_unused, with_norm);
  net->to(torch::kFloat64);
  return net;
}

auto sgd = [](const std::vector<torch::Tensor>& params) -> std::unique_ptr<torch::optim::Optimizer> {
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.1).momentum(0.9));
};

// The global batches of every step, the same on every rank.
struct Data {
  torch::Tensor x, y;  // [steps, world * kPerRank, ...]
};
Data make_data(int world_size) {
  auto gen = at::detail::createCPUGenerator(1234);
  Data data;
  data.x = at::randn({kSteps, world_size * kPerRank, kIn}, gen, torch::kFloat64);
  data.y = at::randint(kClasses, {kSteps, world_size * kPerRank}, gen, torch::kInt64);
  return data;
}

// One rank on the whole global batch.
Net train_reference(const Data& data, bool with_unused = false) {
  Net net = make_net(0, with_unused);
  auto optimizer = sgd(net->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    optimizer->zero_grad();
    torch::nn::functional::cross_entropy(net->forward(data.x[step]), data.y[step]).backward();
    optimizer->step();
  }
  return net;
}

struct Trained {
  Net net;
  std::unique_ptr<DdpStrategy> strategy;  // destroyed first: its hooks point into it
};

// This rank's share of every global batch, in `accum` micro-steps.
Trained train_ddp(const Data& data, const DdpOptions& options, int64_t accum,
                  bool with_unused = false) {
  auto comm = world();
  // Ranks start from different weights: attach() must broadcast rank 0's.
  Net net = make_net(static_cast<uint64_t>(comm->rank()), with_unused);
  auto strategy = std::make_unique<DdpStrategy>(options, comm);
  strategy->attach(*net, sgd);
  const int64_t micro_batch = kPerRank / accum;
  for (int64_t step = 0; step < kSteps; ++step) {
    strategy->before_forward(step);
    for (int64_t micro = 0; micro < accum; ++micro) {
      const int64_t begin = comm->rank() * kPerRank + micro * micro_batch;
      const torch::Tensor x = data.x[step].narrow(0, begin, micro_batch);
      const torch::Tensor y = data.y[step].narrow(0, begin, micro_batch);
      const bool last = micro + 1 == accum;
      strategy->before_backward(last);
      (torch::nn::functional::cross_entropy(net->forward(x), y) / static_cast<double>(accum))
          .backward();
      strategy->after_backward(last);
    }
    strategy->step(0.1);
  }
  return {net, std::move(strategy)};
}

double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  double worst = 0.0;
  const auto pa = a.parameters(), pb = b.parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  }
  return worst;
}

}  // namespace

TEST_CASE("DDP on N ranks equals one rank on the N-times batch", "[dist][ddp]") {
  const Data data = make_data(world()->size());
  Net reference = train_reference(data);
  DdpOptions options;
  options.bucket_mb = GENERATE(1e-5, 25.0, 1000.0);  // one tensor per bucket, default, one bucket
  options.first_bucket_mb = std::min(1.0, options.bucket_mb);
  options.overlap = GENERATE(true, false);
  const int64_t accum = GENERATE(1, 2);
  CAPTURE(options.bucket_mb, options.overlap, accum);
  Trained trained = train_ddp(data, options, accum);
  CHECK(max_difference(*trained.net, *reference) < 1e-12);
}

TEST_CASE("DDP re-plans buckets from the observed gradient order", "[dist][ddp]") {
  DdpOptions options;
  options.bucket_mb = options.first_bucket_mb = 1e-5;  // one tensor per bucket
  Trained trained = train_ddp(make_data(world()->size()), options, 1);
  const DdpStrategy* strategy = trained.strategy.get();
  // Parameters: 0 head.weight, 1 head.bias, 2 body.weight, 3 body.bias. The first guess
  // (reverse registration) puts the body first; backward reaches the head first.
  const dtrain::dist::BucketPlan& plan = strategy->buckets();
  REQUIRE(plan.size() == 4);
  CHECK(plan[0][0] <= 1);
  CHECK(plan[1][0] <= 1);
  CHECK(plan[2][0] >= 2);
  CHECK(plan[3][0] >= 2);
  const auto stats = strategy->stats();
  REQUIRE(stats.has_value());
  CHECK(stats->collectives == 4);
  CHECK(stats->bytes == (kHidden * kClasses + kClasses + kIn * kHidden + kHidden) * 8);
  CHECK(stats->comm_ms >= 0.0);
  CHECK(stats->exposed_ms >= 0.0);
}

TEST_CASE("DDP names parameters without gradients, or reduces them with find_unused",
          "[dist][ddp]") {
  const Data data = make_data(world()->size());
  DdpOptions options;
  CHECK_THROWS_WITH(train_ddp(data, options, 1, /*with_unused=*/true),
                    Contains("unused.weight") && Contains("dist.ddp.find_unused"));
  options.find_unused = true;
  Trained trained = train_ddp(data, options, 1, true);
  Net reference = train_reference(data, true);
  CHECK(max_difference(*trained.net, *reference) < 1e-12);
}

TEST_CASE("BatchNorm buffers follow dist.ddp.buffers", "[dist][ddp]") {
  auto comm = world();
  const std::string policy = GENERATE("broadcast", "average", "local");
  CAPTURE(policy);
  Net net = make_net(0, false, /*with_norm=*/true);
  DdpOptions options;
  options.buffers = policy;
  DdpStrategy strategy(options, comm);
  strategy.attach(*net, sgd);
  // Different data on every rank: the running statistics drift apart.
  torch::manual_seed(100 + comm->rank());
  net->forward(torch::randn({8, kIn}, torch::kFloat64));
  const torch::Tensor local = net->norm->running_mean.clone();
  torch::Tensor all = torch::empty({comm->size() * kHidden}, torch::kFloat64);
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
  // The extra layer joins only micro-step 0: out = head(tanh(body(x))) + extra(x)[:, :kClasses].
  auto forward = [](Net& net, torch::nn::Linear& extra, const torch::Tensor& x, bool with_extra) {
    torch::Tensor out = net->forward(x);
    return with_extra ? out + extra(x).narrow(1, 0, kClasses) : out;
  };
  auto make_extra = [] {
    torch::manual_seed(99);
    torch::nn::Linear extra(kIn, kClasses + 1);
    extra->to(torch::kFloat64);
    return extra;
  };
  constexpr int64_t kAccum = 2;
  const int64_t micro = kPerRank / kAccum;

  Net reference = make_net(0);
  torch::nn::Linear reference_extra = make_extra();
  std::vector<torch::Tensor> all = reference->parameters();
  for (const auto& p : reference_extra->parameters()) all.push_back(p);
  auto optimizer = sgd(all);
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
  strategy.attach(*both, sgd);
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
    strategy.step(0.1);
  }
  CHECK(max_difference(*both->net, *reference) < 1e-12);
  CHECK(max_difference(*both->extra, *reference_extra) < 1e-12);
}
