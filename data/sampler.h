// Sharded, deterministic sampling: the global order of an epoch is a pure function of
// (seed, epoch), and every rank takes a disjoint slice of it, whatever the world size.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace dtrain::data {

struct SamplerOptions {
  int64_t dataset_size = 0;
  int64_t batch_size = 1;   // per rank per micro-step
  int64_t grad_accum = 1;   // micro-steps per step
  int rank = 0;
  int world_size = 1;
  bool shuffle = true;
  // Training drops the last incomplete global batch; evaluation keeps every sample.
  bool drop_last = true;
  uint64_t seed = 0;
};

// Layout of one step's global batch of world x grad_accum x batch_size positions:
//   position = step * G + rank * (grad_accum * batch_size) + micro * batch_size + i,
//   G = world_size * grad_accum * batch_size.
// So N ranks of batch b see, between them, exactly the batch that one rank of batch N*b sees,
// and grad_accum micro-steps of b see exactly one step of grad_accum*b.
// The global order of an epoch is the identity (shuffle = false) or a Fisher-Yates
// permutation driven by data/random.h's xoshiro256** seeded with mix_seed(seed, epoch):
// not torch's RNG, so the order is the same for every LibTorch version and platform.
// Positions past dataset_size (drop_last = false, final step) are omitted.
// Thread-safe: the permutation of the last epoch asked for is cached under a mutex;
// copies share that cache (they have the same options, hence the same permutations).
class ShardedSampler {
 public:
  explicit ShardedSampler(SamplerOptions options);

  const SamplerOptions& options() const { return options_; }
  // drop_last ? floor(dataset_size / G) : ceil(dataset_size / G).
  int64_t steps_per_epoch() const;
  // G = world_size x grad_accum x batch_size.
  int64_t global_batch() const;
  // How many samples indices(epoch, step, micro) returns: batch_size, or fewer (even 0)
  // on the final step when drop_last = false. Pure arithmetic, no permutation.
  int64_t batch_count(int64_t step, int64_t micro) const;
  // This rank's sample indices for one micro-step. With drop_last = false the final step
  // may give a short or empty batch.
  std::vector<int64_t> indices(int64_t epoch, int64_t step, int64_t micro) const;
  // The dataset index at `position` of epoch `epoch`'s global order.
  int64_t index_at(int64_t epoch, int64_t position) const;

 private:
  struct OrderCache {
    std::mutex mutex;
    int64_t epoch = -1;
    std::shared_ptr<const std::vector<int64_t>> order;
  };
  // The permutation of `epoch` (only when shuffling).
  std::shared_ptr<const std::vector<int64_t>> order(int64_t epoch) const;

  SamplerOptions options_;
  std::shared_ptr<OrderCache> cache_;
};

// A fixed 64-bit mix of its arguments (splitmix64), for seeds that must not depend on
// the library version or platform.
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

}  // namespace dtrain::data
