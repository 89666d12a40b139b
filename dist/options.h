// Options of the dist layer (config section [dist] and its strategies' subsections), each key
// declared once in declare(): the config layer reads, checks and documents them from there.
#pragma once

#include "common/error.h"
#include "common/option_spec.h"

#include <array>
#include <cstddef>
#include <string>

namespace dtrain::dist {

// [dist.ddp]: data parallelism with bucketed, overlapped gradient all-reduce.
struct DdpOptions {
  // Gradient bytes per all-reduce bucket (MiB). Larger buckets reach higher bandwidth;
  // smaller ones start communicating earlier in backward.
  double bucket_mb = 25.0;
  // The first bucket (the last layers' gradients, ready first) is small so communication
  // starts as early as possible.
  double first_bucket_mb = 1.0;
  // Launch each bucket's all-reduce from the gradient hooks, during backward; false: all
  // buckets after backward (the reference for measuring what overlap hides).
  bool overlap = true;
  // BatchNorm running statistics: "broadcast" rank 0's before every forward (PyTorch DDP's
  // default), "average" them over ranks before every forward, or keep them "local".
  std::string buffers = "broadcast";
  // Parameters without a gradient in a step are reduced as zeros instead of being an error.
  bool find_unused = false;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// [dist.zero]: ZeRO, the optimizer state (stage 1) sharded over the ranks.
struct ZeroOptions {
  // 1: optimizer state sharded. Stages 2 (gradients) and 3 (parameters) are not built yet.
  int64_t stage = 1;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// How ranks cooperate. Each strategy's options are the subsection named after it.
enum class StrategyKind { kSingle, kDdp, kZero };
// The config names of the strategies, in the order of StrategyKind.
inline constexpr std::array<const char*, 3> kStrategyNames = {"single", "ddp", "zero"};
inline const char* strategy_name(StrategyKind kind) {
  return kStrategyNames[static_cast<size_t>(kind)];
}

// What dist needs to know of the rest of the config; the trainer fills it.
struct DistContext {
  // Dynamic loss scaling (train.precision = "fp16"): the overflow check reads every gradient.
  bool fp16_loss_scaling = false;
};

struct DistOptions {
  // "single": one rank, no communication; "ddp": data parallel; "zero": data parallel with
  // sharded optimizer state.
  StrategyKind strategy = StrategyKind::kSingle;
  // Upper bound on any collective; a rank that never joins ends the job after this long.
  double timeout_s = 300.0;
  DdpOptions ddp;
  ZeroOptions zero;

  void declare(OptionSpecs& keys);
  // The declared ranges and choices, the subsections' checks, and what the chosen strategy
  // requires of the rest of the config.
  FieldErrors validate(const DistContext& context) const;
  // Keys of another strategy's subsection set to something other than their defaults: they
  // have no effect (warnings, not errors).
  FieldErrors unused_keys() const;
};

}  // namespace dtrain::dist
