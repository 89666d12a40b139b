#include "data/sampler.h"

#include "common/error.h"
#include "data/random.h"

#include <algorithm>
#include <numeric>
#include <utility>

namespace dtrain::data {

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  // Each stage is a bijection of its input, so distinct b (or c) give distinct seeds.
  uint64_t h = mix64(a + kGoldenGamma);
  h = mix64(h ^ (b + 2 * kGoldenGamma));
  return mix64(h ^ (c + 3 * kGoldenGamma));
}

ShardedSampler::ShardedSampler(SamplerOptions options)
    : options_(options), cache_(std::make_shared<OrderCache>()) {
  DTRAIN_CHECK(options_.dataset_size >= 0, "dataset_size {}", options_.dataset_size);
  DTRAIN_CHECK(options_.batch_size >= 1, "batch_size {}", options_.batch_size);
  DTRAIN_CHECK(options_.grad_accum >= 1, "grad_accum {}", options_.grad_accum);
  DTRAIN_CHECK(options_.world_size >= 1 && options_.rank >= 0 &&
                   options_.rank < options_.world_size,
               "rank {} of world {}", options_.rank, options_.world_size);
}

int64_t ShardedSampler::global_batch() const {
  return options_.world_size * options_.grad_accum * options_.batch_size;
}

int64_t ShardedSampler::steps_per_epoch() const {
  const int64_t g = global_batch();
  return options_.drop_last ? options_.dataset_size / g : (options_.dataset_size + g - 1) / g;
}

int64_t ShardedSampler::batch_count(int64_t step, int64_t micro) const {
  DTRAIN_CHECK(step >= 0 && step < steps_per_epoch(), "step {} outside [0, {})", step,
               steps_per_epoch());
  DTRAIN_CHECK(micro >= 0 && micro < options_.grad_accum, "micro {} outside [0, {})", micro,
               options_.grad_accum);
  const int64_t b = options_.batch_size;
  const int64_t first = step * global_batch() + options_.rank * options_.grad_accum * b +
                        micro * b;
  return std::clamp<int64_t>(options_.dataset_size - first, 0, b);
}

std::vector<int64_t> ShardedSampler::indices(int64_t epoch, int64_t step, int64_t micro) const {
  const int64_t count = batch_count(step, micro);
  const int64_t b = options_.batch_size;
  const int64_t first = step * global_batch() + options_.rank * options_.grad_accum * b +
                        micro * b;
  std::vector<int64_t> result(static_cast<size_t>(count));
  if (!options_.shuffle) {
    std::iota(result.begin(), result.end(), first);
    return result;
  }
  const auto permutation = order(epoch);
  std::copy_n(permutation->begin() + first, count, result.begin());
  return result;
}

int64_t ShardedSampler::index_at(int64_t epoch, int64_t position) const {
  DTRAIN_CHECK(position >= 0 && position < options_.dataset_size,
               "position {} outside [0, {})", position, options_.dataset_size);
  if (!options_.shuffle) return position;
  return (*order(epoch))[static_cast<size_t>(position)];
}

std::shared_ptr<const std::vector<int64_t>> ShardedSampler::order(int64_t epoch) const {
  DTRAIN_CHECK(epoch >= 0, "epoch {}", epoch);
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (cache_->epoch == epoch) return cache_->order;
  auto permutation = std::make_shared<std::vector<int64_t>>(
      static_cast<size_t>(options_.dataset_size));
  std::iota(permutation->begin(), permutation->end(), int64_t{0});
  // Fisher-Yates (Knuth's Algorithm P), from the top down.
  Rng rng(mix_seed(options_.seed, static_cast<uint64_t>(epoch)));
  for (int64_t i = options_.dataset_size - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(rng.below(static_cast<uint64_t>(i) + 1));
    std::swap((*permutation)[static_cast<size_t>(i)], (*permutation)[static_cast<size_t>(j)]);
  }
  cache_->epoch = epoch;
  cache_->order = std::move(permutation);
  return cache_->order;
}

}  // namespace dtrain::data
