// Internal to data/: a small, fixed pseudo-random generator (xoshiro256**, seeded through
// splitmix64), so shuffles and augmentations are identical across LibTorch versions,
// compilers and platforms. Not thread-safe: each sample or epoch makes its own.
#pragma once

#include <cstdint>

namespace dtrain::data {

// splitmix64's output function: a bijective 64-bit mix (Steele, Lea, Flood 2014).
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ULL;

// xoshiro256** 1.0 (Blackman, Vigna 2018), state filled from splitmix64(seed).
class Rng {
 public:
  explicit Rng(uint64_t seed) {
    for (uint64_t& s : state_) {
      seed += kGoldenGamma;
      s = mix64(seed);
    }
  }

  uint64_t next() {
    const uint64_t result = rotl(state_[1] * 5, 7) * 9;
    const uint64_t t = state_[1] << 17;
    state_[2] ^= state_[0];
    state_[3] ^= state_[1];
    state_[1] ^= state_[2];
    state_[0] ^= state_[3];
    state_[2] ^= t;
    state_[3] = rotl(state_[3], 45);
    return result;
  }

  // Uniform in [0, n), unbiased (rejects the top partial range). n > 0.
  uint64_t below(uint64_t n) {
    const uint64_t threshold = (0 - n) % n;  // 2^64 mod n
    for (;;) {
      const uint64_t r = next();
      if (r >= threshold) return r % n;
    }
  }

  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double uniform(double low, double high) { return low + (high - low) * uniform(); }

 private:
  static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
  uint64_t state_[4];
};

}  // namespace dtrain::data
