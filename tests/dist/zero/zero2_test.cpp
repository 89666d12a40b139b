// ZeRO stage 2 against one process on the whole batch and against DDP
// (tests/dist/equivalence.h): N ranks of batch b, each keeping gradients and optimizer state
// for its shard of every bucket only, must take exactly the steps one process takes on batch
// N*b, with every optimizer (LARS's and LAMB's norms over tensors split across ranks, LAMB's
// clipping over all of them), with gradient accumulation, with buckets small enough that
// tensors straddle bucket and rank boundaries (the 213 parameters divide by none of 2, 3, 4
// in every bucket), and across checkpoints to and from stage 1 and DDP on another number of
// ranks. Float64: tolerance 1e-12.
#include "dist/ddp/ddp.h"
#include "dist/zero/bucket_shards.h"
#include "dist/zero/zero.h"
#include "dist/zero/zero2.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <numeric>

using dtrain::dist::Zero2Strategy;
using Catch::Matchers::Contains;
using namespace equivalence;

namespace {

// Buckets of 40 float64 elements: the test net's are then (middle.bias, middle.weight): 110,
// (body.bias, body.weight): 70 and (head.bias, head.weight): 33 elements. 4000: one bucket.
dtrain::dist::ZeroOptions stage2(int64_t bucket_elements = 40) {
  dtrain::dist::ZeroOptions options;
  options.stage = 2;
  options.bucket_mb = static_cast<double>(bucket_elements) * 8 / (1 << 20);
  return options;
}

enum class Kind { kDdp, kZero1, kZero2 };

const char* name_of(Kind kind) {
  return kind == Kind::kDdp ? "ddp" : kind == Kind::kZero1 ? "zero stage 1" : "zero stage 2";
}

std::unique_ptr<dtrain::dist::Strategy> make_strategy(
    Kind kind, std::shared_ptr<dtrain::dist::Communicator> comm = world()) {
  if (kind == Kind::kZero2) return std::make_unique<Zero2Strategy>(stage2(), std::move(comm));
  if (kind == Kind::kZero1) return std::make_unique<dtrain::dist::ZeroStrategy>(std::move(comm));
  return std::make_unique<dtrain::dist::DdpStrategy>(dtrain::dist::DdpOptions{}, std::move(comm));
}

}  // namespace

TEST_CASE("ZeRO-2 cuts every bucket into equal rank-aligned shards", "[dist][zero]") {
  const std::vector<int64_t> numels = {5, 1, 7, 3, 100, 2, 0, 40};
  std::vector<torch::Tensor> params;
  for (const int64_t numel : numels) params.push_back(torch::zeros({numel}));
  const dtrain::dist::Layout packed =
      dtrain::dist::packed_layout({{7, 6, 5}, {4}, {3, 2, 1, 0}}, params);
  for (int ranks = 1; ranks <= 5; ++ranks) {
    INFO("ranks " << ranks);
    const dtrain::dist::PsPlan plan = dtrain::dist::rank_aligned_plan(packed, numels, ranks);
    REQUIRE(plan.layout.size() == packed.size());
    std::vector<int64_t> covered(numels.size(), 0);
    for (size_t b = 0; b < plan.layout.size(); ++b) {
      const int64_t numel = plan.layout[b].numel;
      CHECK(numel % ranks == 0);
      CHECK(numel - packed[b].numel < ranks);  // padding: fewer than one element per rank
      REQUIRE(plan.first_chunk[b + 1] - plan.first_chunk[b] == ranks);
      for (int r = 0; r < ranks; ++r) {
        const dtrain::dist::PsChunk& chunk = plan.chunks[plan.first_chunk[b] + r];
        CHECK(chunk.server == r);
        CHECK(chunk.offset == r * numel / ranks);
        CHECK(chunk.numel == numel / ranks);
      }
    }
    for (const dtrain::dist::PsPiece& piece : plan.pieces) covered[piece.param] += piece.numel;
    CHECK(covered == numels);  // every element in exactly one piece
  }
}

TEST_CASE("ZeRO-2's start-up line says \"1 gradient bucket\" and \"1 shard\"", "[dist][zero]") {
  CHECK_THAT(dtrain::dist::stage2_plan_line(1, 1, 1 << 20, 1 << 20),
             Contains("zero stage 2: 1 gradient bucket, each cut into 1 shard; each rank "
                      "updates 1.000 of the 1.000 MiB of parameters"));
  CHECK_THAT(dtrain::dist::stage2_plan_line(3, 2, 1 << 19, 1 << 20),
             Contains("3 gradient buckets, each cut into 2 shards;"));
}

TEST_CASE("ZeRO-2 on N ranks equals DDP and one rank on the N-times batch", "[dist][zero]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  const int64_t micro = GENERATE(1, 2);
  const int64_t bucket_elements = GENERATE(40, 4000);
  INFO("optimizer " << name << ", " << micro << " micro-steps, buckets of " << bucket_elements
                    << " elements");
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);

  Net ddp_net = make_net();
  dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
  ddp.attach(*ddp_net, factory(options));
  train(ddp_net, ddp, data, 0, kSteps, options.lr, micro);

  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  Zero2Strategy strategy(stage2(bucket_elements), world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr, micro);
  const double from_ddp = max_difference(*net, *ddp_net);
  CHECK(from_ddp < kTolerance);
  CHECK(max_difference(*net, *reference) < kTolerance);
  if (world()->rank() == 0) {
    std::cout << "zero stage 2 vs ddp, np" << world()->size() << ", " << name << ", micro "
              << micro << ", " << strategy.plan().layout.size()
              << " bucket(s): max |difference| " << from_ddp << "\n";
  }

  // The last step's communication: per bucket, one reduce-scatter and one all-gather of the
  // padded bucket, the wire bytes of DDP's all-reduce.
  const auto& plan = strategy.plan();
  int64_t padded = 0;
  for (const auto& bucket : plan.layout) padded += bucket.numel;
  const dtrain::dist::Stats stats = strategy.stats();
  CHECK(stat(stats, "comm/collectives") == 2.0 * static_cast<double>(plan.layout.size()));
  CHECK(stat(stats, "comm/bytes") == 2.0 * static_cast<double>(padded) * 8);
  // Memory held: the whole parameters, only a shard of the gradients (plus two buckets).
  const int64_t shard = padded / world()->size();
  int64_t largest = 0;
  for (const auto& bucket : plan.layout) largest = std::max(largest, bucket.numel);
  CHECK(stat(stats, "memory/gradients_mb") * (1 << 20) ==
        static_cast<double>((shard + std::min<int64_t>(2, plan.layout.size()) * largest) * 8));
  CHECK(stat(stats, "memory/parameters_mb") * (1 << 20) ==
        static_cast<double>((padded + shard) * 8));
}

TEST_CASE("ZeRO-2 resumes from and into stage 1 and DDP on another number of ranks",
          "[dist][zero]") {
  // Steps 0-1 under the first strategy on the first min(2, N) ranks (global batch 2b),
  // checkpoint, steps 2-3 under the second on all N ranks (global batch Nb): the same as one
  // rank taking those two batch sizes.
  const auto [first_kind, second_kind] = GENERATE(table<Kind, Kind>(
      {{Kind::kZero2, Kind::kZero2}, {Kind::kZero2, Kind::kZero1}, {Kind::kZero1, Kind::kZero2},
       {Kind::kZero2, Kind::kDdp}, {Kind::kDdp, Kind::kZero2}}));
  INFO(name_of(first_kind) << ", then " << name_of(second_kind));
  const auto options = optimizer_options("lamb");
  const int64_t n = world()->size(), writers = std::min<int64_t>(2, n);
  const Data data = make_data(n);
  Net reference = train_reference_resumed(data, options, writers, n);

  const std::string dir = fresh_directory("zero2_reshard_test");
  const bool writer = world()->rank() < writers;
  std::shared_ptr<dtrain::dist::Communicator> group =
      world()->split(writer ? 0 : 1, world()->rank());
  Net net = make_net();
  if (writer) {
    auto before = make_strategy(first_kind, group);
    before->attach(*net, factory(options));
    train(net, *before, data, 0, 2, options.lr, 1, group->rank());
    write_checkpoint(*before, dir, *group);
  }
  // Every rank loads after the writers saved (a world barrier, which blocks the host on NCCL
  // too). attach() then gives every rank rank 0's weights, the writers'.
  world()->barrier();
  Net resumed = copy_of(net);
  auto after = make_strategy(second_kind);
  after->attach(*resumed, factory(options));
  after->load(dir);
  train(resumed, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*resumed, *reference) < kTolerance);
}
