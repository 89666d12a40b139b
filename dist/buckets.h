// Gradient buckets: which parameters share one all-reduce, and in which order buckets launch.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dtrain::dist {

// Parameter indices grouped into buckets, in launch order.
using BucketPlan = std::vector<std::vector<int64_t>>;

// `order`: indices into `params` in the order their gradients are expected to be ready.
// Walking that order, parameters of one dtype and device fill a bucket until it holds at least
// `cap_bytes` (the first bucket of each dtype and device: `first_cap_bytes`). Buckets are
// returned in the order of their first parameter, so the earliest-ready bucket launches first.
BucketPlan plan_buckets(const std::vector<int64_t>& order,
                        const std::vector<torch::Tensor>& params, int64_t first_cap_bytes,
                        int64_t cap_bytes);

}  // namespace dtrain::dist
