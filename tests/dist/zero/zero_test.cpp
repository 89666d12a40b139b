// ZeRO stage 1 against one process on the whole batch (tests/dist/equivalence.h): N ranks of
// batch b, each keeping optimizer state for its own parameters only, must take exactly the
// steps one process takes on batch N*b, with every optimizer (LARS and LAMB need whole-tensor
// norms; LAMB's clipping a global one), with gradient accumulation, and across checkpoints:
// its own, on another number of ranks, and to and from DDP's. Float64: tolerance 1e-12.
#include "common/error.h"
#include "dist/ddp/ddp.h"
#include "dist/zero/zero.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <numeric>

using dtrain::dist::partition_parameters;
using dtrain::dist::ZeroStrategy;
using Catch::Matchers::Contains;
using namespace equivalence;

namespace {

std::unique_ptr<ZeroStrategy> attach_zero(
    Net& net, const dtrain::optim::OptimizerOptions& options,
    std::shared_ptr<dtrain::dist::Communicator> comm = world()) {
  auto strategy = std::make_unique<ZeroStrategy>(std::move(comm));
  strategy->attach(*net, factory(options));
  return strategy;
}

}  // namespace

TEST_CASE("ZeRO partitions whole tensors, contiguous and balanced", "[dist][zero]") {
  const std::vector<int64_t> numels = {5, 1, 7, 3, 100, 2, 0, 40};
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  for (int ranks = 1; ranks <= 9; ++ranks) {
    INFO("ranks " << ranks);
    const auto partition = partition_parameters(numels, ranks);
    REQUIRE(partition.first.size() == static_cast<size_t>(ranks + 1));
    CHECK(partition.first.front() == 0);
    CHECK(partition.first.back() == static_cast<int64_t>(numels.size()));
    CHECK(std::is_sorted(partition.first.begin(), partition.first.end()));
    CHECK(partition.shard_numel * ranks >= total);
    CHECK(partition.shard_numel <= (total + ranks - 1) / ranks + 100);  // + the largest tensor
    for (size_t i = 0; i < numels.size(); ++i) {
      const int owner = partition.owner(static_cast<int64_t>(i));
      CHECK(partition.first[owner] <= static_cast<int64_t>(i));
      CHECK(static_cast<int64_t>(i) < partition.first[owner + 1]);
      CHECK(partition.offset[i] >= owner * partition.shard_numel);
      CHECK(partition.offset[i] + numels[i] <= (owner + 1) * partition.shard_numel);
    }
  }
  // Two ranks split 100 + 100 evenly rather than 200 | 0.
  CHECK(partition_parameters({100, 100}, 2).shard_numel == 100);
}

TEST_CASE("ZeRO-1 warns of padding with the parameters' and the gradients' own figures",
          "[dist][zero]") {
  // SimpleCNN on 3 ranks: blocks of 1.72x an even share; the gradients hold the flat bucket
  // and the rank's averaged share, 2.29x DDP's (memory/gradients_mb).
  const std::string warning = dtrain::dist::stage1_padding_warning(3, 300, 172);
  CHECK_THAT(warning, Contains("over 3 ranks (the largest share is 1.72x an even one)"));
  CHECK_THAT(warning, Contains("flat parameters take 1.72x DDP's memory"));
  CHECK_THAT(warning, Contains("gradients (the flat bucket and this rank's averaged share) "
                               "2.29x"));
  CHECK(dtrain::dist::stage1_padding_warning(3, 300, 125).empty());  // 1.25x: said nothing
}

TEST_CASE("ZeRO-1 on N ranks equals one rank on the N-times batch", "[dist][zero]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  INFO("optimizer " << name);
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  int64_t whole_state = 0;
  Net reference = train_reference(data, options, {}, &whole_state);

  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  auto strategy = attach_zero(net, options);
  train(net, *strategy, data, 0, kSteps, options.lr);
  CHECK(max_difference(*net, *reference) < kTolerance);

  // The ranks' optimizer states partition the whole model's: together exactly one copy, each
  // rank at most its share's worth (the state per element is the same everywhere).
  const dtrain::dist::Stats stats = strategy->stats();
  const auto mine = static_cast<int64_t>(stat(stats, "memory/optimizer_state_mb") * (1 << 20));
  torch::Tensor together = torch::tensor({mine}).to(device());
  world()->all_reduce(together, dtrain::dist::ReduceOp::kSum)->wait();
  CHECK(together.item<int64_t>() == whole_state);
  const auto params = net->parameters();
  const int64_t total =
      std::accumulate(params.begin(), params.end(), int64_t{0},
                      [](int64_t sum, const torch::Tensor& p) { return sum + p.numel(); });
  CHECK(mine * total <= whole_state * strategy->partition().shard_numel);

  // The last step's communication: one reduce-scatter and one all-gather of the flat buffer,
  // the wire bytes of one all-reduce, none of it hidden by backward here.
  const double bytes = static_cast<double>(strategy->partition().shard_numel) *
                       world()->size() * 8;
  const double n = world()->size();
  CHECK(stat(stats, "comm/collectives") == 2);
  CHECK(stat(stats, "comm/bytes") == 2 * bytes);
  CHECK(stat(stats, "comm/sent_bytes") == Approx(bytes * 2 * (n - 1) / n));
  CHECK(stat(stats, "comm/exposed_ms") >= 0.0);
}

TEST_CASE("ZeRO-1 with accumulation: 2 micro-steps of b/2 equal 1 step of b", "[dist][zero]") {
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net();
  auto strategy = attach_zero(net, options);
  train(net, *strategy, data, 0, kSteps, options.lr, /*micro=*/2);
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ZeRO-1 resumes from its sharded checkpoint", "[dist][zero]") {
  const auto options = optimizer_options("adamw");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);

  const std::string dir = fresh_directory("zero_checkpoint_test");
  Net first = make_net();
  auto before = attach_zero(first, options);
  train(first, *before, data, 0, 2, options.lr);
  save_checkpoint(*before, dir);

  // A fresh model with the first half's weights, and a fresh strategy loading the state.
  Net resumed = copy_of(first);
  auto after = attach_zero(resumed, options);
  after->load(dir);
  train(resumed, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*resumed, *reference) < kTolerance);
}

TEST_CASE("ZeRO-1 resumes on another number of ranks", "[dist][zero]") {
  // Steps 0-1 on the first min(2, N) ranks (global batch 2b), checkpoint, steps 2-3 on all N
  // ranks (global batch Nb): the same as one rank taking those two batch sizes.
  const auto options = optimizer_options("lamb");
  const int64_t n = world()->size(), writers = std::min<int64_t>(2, n);
  const Data data = make_data(n);
  Net reference = train_reference_resumed(data, options, writers, n);

  const std::string dir = fresh_directory("zero_reshard_test");
  const bool writer = world()->rank() < writers;
  std::shared_ptr<dtrain::dist::Communicator> group =
      world()->split(writer ? 0 : 1, world()->rank());
  Net first = make_net();
  if (writer) {
    auto before = attach_zero(first, options, group);
    train(first, *before, data, 0, 2, options.lr, 1, group->rank());
    write_checkpoint(*before, dir, *group);
  }
  // Every rank loads after the writers saved (a world barrier, which blocks the host on NCCL
  // too). attach() then gives every rank rank 0's weights, the writers'.
  world()->barrier();
  auto after = attach_zero(first, options);
  after->load(dir);
  train(first, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*first, *reference) < kTolerance);
}

TEST_CASE("ZeRO-1 and DDP resume from each other's checkpoints", "[dist][zero]") {
  const auto options = optimizer_options("adamw");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  const bool ddp_first = GENERATE(true, false);
  INFO((ddp_first ? "ddp, then zero" : "zero, then ddp"));
  const std::string dir = fresh_directory("zero_ddp_checkpoint_test");

  auto make = [](bool ddp) -> std::unique_ptr<dtrain::dist::Strategy> {
    if (!ddp) return std::make_unique<ZeroStrategy>(world());
    return std::make_unique<dtrain::dist::DdpStrategy>(dtrain::dist::DdpOptions{}, world());
  };
  Net net = make_net();
  auto before = make(ddp_first);
  before->attach(*net, factory(options));
  train(net, *before, data, 0, 2, options.lr);
  save_checkpoint(*before, dir);
  before.reset();  // DDP's gradient hooks go with it

  Net resumed = copy_of(net);
  auto after = make(!ddp_first);
  after->attach(*resumed, factory(options));
  after->load(dir);
  train(resumed, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*resumed, *reference) < kTolerance);
}

TEST_CASE("ZeRO-1 rejects a checkpoint of another model", "[dist][zero]") {
  const std::string dir = fresh_directory("zero_foreign_checkpoint_test");
  if (world()->rank() == 0) {
    torch::save(torch::tensor(std::vector<int64_t>{0, 1}), dir + "/zero_partition.pt");
  }
  world()->barrier();
  Net net = make_net();
  auto strategy = attach_zero(net, optimizer_options("sgd"));
  CHECK_THROWS_WITH(strategy->load(dir), Contains("a model with 1 parameter tensors") &&
                                             Contains("this model has 6"));
  CHECK_THROWS_WITH(strategy->load("no_such_dir"), Contains("no optimizer state"));
}
