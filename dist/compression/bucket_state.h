// Per-bucket codec state (error-feedback residuals, DGC momentum) that follows the parameters
// when buckets are re-planned and when a checkpoint is loaded: each slot is a flat tensor per
// bucket, like the bucket's gradients, and converts to and from one tensor per parameter.
#pragma once

#include "dist/reducer.h"

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtrain::dist::compression {

// Parameter index -> its part of a slot, flat.
using ByParam = std::map<int64_t, torch::Tensor>;

class BucketState {
 public:
  // `numels`: each parameter's element count, by parameter index.
  BucketState(std::vector<std::string> slots, std::vector<int64_t> numels)
      : slots_(std::move(slots)), numels_(std::move(numels)) {}

  const std::vector<std::string>& slots() const { return slots_; }
  // Slot `slot` of the bucket [bucket.layout.numel], on the bucket's device and dtype:
  // made at first use from what set_by_param() or relayout() left for its parameters, zeros
  // elsewhere.
  torch::Tensor& at(const Bucket& bucket, size_t slot);
  // Every slot of every bucket, one tensor per parameter, for a checkpoint.
  std::vector<ByParam> by_param() const;
  // Replaces the state: bucket tensors are made again from these at first use.
  void set_by_param(std::vector<ByParam> state);
  // After the reducer re-planned its buckets: the state moves with the parameters.
  void relayout(const std::vector<Bucket>& buckets);
  // Zeros the elements of `tensor` (bucket-sized) that no parameter covers (ZeRO-2's padding):
  // state is checkpointed by parameter, so nothing may be kept there.
  void clear_gaps(const Bucket& bucket, torch::Tensor& tensor) const;
  // Every bucket's tensor of `slot` made so far.
  std::vector<torch::Tensor> all(size_t slot) const;
  // Bytes held, every slot of every bucket and what waits for first use.
  int64_t bytes() const;

 private:
  struct Entry {
    BucketLayout layout;
    std::vector<torch::Tensor> slots;
  };
  std::vector<std::string> slots_;
  std::vector<int64_t> numels_;
  std::vector<Entry> entries_;    // by bucket index; slots undefined until first use
  std::vector<ByParam> pending_;  // by slot: values waiting for their bucket's first use
};

}  // namespace dtrain::dist::compression
