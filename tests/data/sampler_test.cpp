#include "data/sampler.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <set>
#include <thread>
#include <vector>

using dtrain::data::mix_seed;
using dtrain::data::SamplerOptions;
using dtrain::data::ShardedSampler;

namespace {

SamplerOptions make_options(int64_t size, int64_t batch, int64_t accum, int rank, int world,
                            bool drop_last = true, uint64_t seed = 42) {
  SamplerOptions options;
  options.dataset_size = size;
  options.batch_size = batch;
  options.grad_accum = accum;
  options.rank = rank;
  options.world_size = world;
  options.drop_last = drop_last;
  options.seed = seed;
  return options;
}

// Every rank's indices of one step, concatenated in rank, micro order.
std::vector<int64_t> step_indices(const SamplerOptions& base, int64_t epoch, int64_t step) {
  std::vector<int64_t> all;
  for (int rank = 0; rank < base.world_size; ++rank) {
    SamplerOptions options = base;
    options.rank = rank;
    const ShardedSampler sampler(options);
    for (int64_t micro = 0; micro < options.grad_accum; ++micro) {
      const auto indices = sampler.indices(epoch, step, micro);
      all.insert(all.end(), indices.begin(), indices.end());
    }
  }
  return all;
}

}  // namespace

TEST_CASE("mix_seed and the epoch permutation match an independent Python derivation") {
  // Values from a Python transcription of splitmix64 + xoshiro256** + Fisher-Yates; they pin
  // the order so it cannot drift across compilers, platforms or LibTorch versions.
  CHECK(mix_seed(0, 0, 0) == 0x1e35cdb4bf4f6f16ULL);
  CHECK(mix_seed(1, 2, 3) == 0xcead1f2fa8f8a720ULL);
  const ShardedSampler sampler(make_options(10, 1, 1, 0, 1));
  std::vector<int64_t> epoch0;
  std::vector<int64_t> epoch1;
  for (int64_t p = 0; p < 10; ++p) {
    epoch0.push_back(sampler.index_at(0, p));
    epoch1.push_back(sampler.index_at(1, p));
  }
  CHECK(epoch0 == std::vector<int64_t>{4, 3, 6, 5, 0, 8, 1, 9, 2, 7});
  CHECK(epoch1 == std::vector<int64_t>{4, 7, 8, 5, 6, 1, 9, 2, 0, 3});
  const ShardedSampler other_seed(make_options(10, 1, 1, 0, 1, true, 7));
  CHECK(other_seed.index_at(0, 0) == 6);
}

TEST_CASE("ranks cover the epoch's first steps x global batch positions, disjointly") {
  const int64_t size = 103;
  for (int world = 1; world <= 4; ++world) {
    for (int64_t accum = 1; accum <= 2; ++accum) {
      const SamplerOptions base = make_options(size, 3, accum, 0, world);
      const ShardedSampler reference(base);
      const int64_t g = world * accum * 3;
      REQUIRE(reference.global_batch() == g);
      REQUIRE(reference.steps_per_epoch() == size / g);
      std::vector<int64_t> previous_epoch;
      for (int64_t epoch = 0; epoch < 3; ++epoch) {
        std::vector<int64_t> seen;
        for (int64_t step = 0; step < reference.steps_per_epoch(); ++step) {
          const auto indices = step_indices(base, epoch, step);
          REQUIRE(static_cast<int64_t>(indices.size()) == g);
          // The layout of sampler.h: rank-major, then micro, then i.
          for (int64_t k = 0; k < g; ++k) {
            REQUIRE(indices[static_cast<size_t>(k)] == reference.index_at(epoch, step * g + k));
          }
          seen.insert(seen.end(), indices.begin(), indices.end());
        }
        const int64_t covered = reference.steps_per_epoch() * g;
        std::vector<int64_t> expected;
        for (int64_t p = 0; p < covered; ++p) expected.push_back(reference.index_at(epoch, p));
        std::set<int64_t> unique(seen.begin(), seen.end());
        CHECK(static_cast<int64_t>(unique.size()) == covered);  // disjoint
        CHECK(std::set<int64_t>(expected.begin(), expected.end()) == unique);
        CHECK(*unique.rbegin() < size);
        CHECK(*unique.begin() >= 0);
        CHECK(seen != previous_epoch);  // each epoch has its own order
        previous_epoch = seen;
      }
    }
  }
}

TEST_CASE("each epoch's order is a permutation, and epochs differ") {
  const ShardedSampler sampler(make_options(1000, 10, 1, 0, 1));
  std::vector<int64_t> epoch0;
  std::vector<int64_t> epoch1;
  for (int64_t p = 0; p < 1000; ++p) {
    epoch0.push_back(sampler.index_at(0, p));
    epoch1.push_back(sampler.index_at(1, p));
  }
  CHECK(epoch0 != epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  for (int64_t p = 0; p < 1000; ++p) REQUIRE(epoch0[static_cast<size_t>(p)] == p);
}

TEST_CASE("a step's global batch is the same set for 1 rank of 4N as for N ranks of 4") {
  for (int world = 1; world <= 4; ++world) {
    const SamplerOptions one_rank = make_options(200, 4 * world, 1, 0, 1);
    const SamplerOptions ranks = make_options(200, 4, 1, 0, world);
    const SamplerOptions accumulating = make_options(200, 2, 2, 0, world);
    REQUIRE(ShardedSampler(one_rank).steps_per_epoch() == ShardedSampler(ranks).steps_per_epoch());
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      for (int64_t step = 0; step < ShardedSampler(ranks).steps_per_epoch(); ++step) {
        const auto a = step_indices(one_rank, epoch, step);
        const auto b = step_indices(ranks, epoch, step);
        const auto c = step_indices(accumulating, epoch, step);
        // Same order, not only the same set: the layout is rank-major.
        REQUIRE(a == b);
        REQUIRE(b == c);
      }
    }
  }
}

TEST_CASE("drop_last = false covers every sample exactly once, with short final batches") {
  for (int world = 1; world <= 4; ++world) {
    for (int64_t accum = 1; accum <= 2; ++accum) {
      const SamplerOptions base = make_options(37, 4, accum, 0, world, /*drop_last=*/false);
      const ShardedSampler reference(base);
      const int64_t g = reference.global_batch();
      REQUIRE(reference.steps_per_epoch() == (37 + g - 1) / g);
      std::vector<int64_t> seen;
      for (int rank = 0; rank < world; ++rank) {
        SamplerOptions options = base;
        options.rank = rank;
        const ShardedSampler sampler(options);
        for (int64_t step = 0; step < sampler.steps_per_epoch(); ++step) {
          for (int64_t micro = 0; micro < accum; ++micro) {
            const auto indices = sampler.indices(1, step, micro);
            REQUIRE(static_cast<int64_t>(indices.size()) == sampler.batch_count(step, micro));
            REQUIRE(indices.size() <= 4);
            seen.insert(seen.end(), indices.begin(), indices.end());
          }
        }
      }
      std::sort(seen.begin(), seen.end());
      REQUIRE(seen.size() == 37);
      for (int64_t i = 0; i < 37; ++i) CHECK(seen[static_cast<size_t>(i)] == i);
    }
  }
  // 10 samples, 4 ranks of 2: the second step has positions 8, 9 only; ranks 1-3 get nothing.
  const ShardedSampler last_rank(make_options(10, 2, 1, 3, 4, false));
  CHECK(last_rank.steps_per_epoch() == 2);
  CHECK(last_rank.indices(0, 1, 0).empty());
  CHECK(ShardedSampler(make_options(10, 2, 1, 0, 4, false)).indices(0, 1, 0).size() == 2);
}

TEST_CASE("shuffle = false keeps the dataset order") {
  SamplerOptions options = make_options(20, 3, 2, 1, 2);
  options.shuffle = false;
  const ShardedSampler sampler(options);
  // G = 12, so one step; rank 1, micro 1 starts at position 1 * 6 + 1 * 3 = 9.
  REQUIRE(sampler.steps_per_epoch() == 1);
  CHECK(sampler.indices(5, 0, 1) == std::vector<int64_t>{9, 10, 11});
  CHECK(sampler.index_at(3, 17) == 17);
}

TEST_CASE("copies and threads see the same permutation") {
  const ShardedSampler sampler(make_options(5000, 8, 1, 0, 1));
  const ShardedSampler copy = sampler;
  std::vector<std::vector<int64_t>> results(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < results.size(); ++t) {
    threads.emplace_back([&, t] {
      const ShardedSampler& s = t % 2 == 0 ? sampler : copy;
      for (int64_t round = 0; round < 20; ++round) {
        const int64_t epoch = round % 3;  // force cache refills from several threads
        const auto indices = s.indices(epoch, 7, 0);
        if (epoch == 1) results[t] = indices;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (const auto& result : results) CHECK(result == sampler.indices(1, 7, 0));
}
