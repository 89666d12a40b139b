#include "dist/compression/bucket_state.h"

#include "common/error.h"

#include <algorithm>

namespace dtrain::dist::compression {

torch::Tensor& BucketState::at(const Bucket& bucket, size_t slot) {
  const auto index = static_cast<size_t>(bucket.index);
  if (entries_.size() <= index) entries_.resize(index + 1);
  Entry& entry = entries_[index];
  if (entry.slots.empty()) {
    entry.layout = bucket.layout;
    entry.slots.resize(slots_.size());
  }
  DTRAIN_CHECK(entry.layout == bucket.layout,
               "codec state of bucket {} is laid out for another plan (relayout() missed)", index);
  torch::Tensor& tensor = entry.slots.at(slot);
  if (tensor.defined()) return tensor;
  tensor = torch::zeros({bucket.layout.numel}, bucket.flat.options());
  if (slot < pending_.size()) {
    ByParam& pending = pending_[slot];
    for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
      const auto found = pending.find(bucket.layout.params[i]);
      if (found == pending.end()) continue;
      tensor.narrow(0, bucket.layout.offsets[i], numels_.at(found->first))
          .copy_(found->second.reshape({-1}));
      pending.erase(found);
    }
  }
  return tensor;
}

std::vector<ByParam> BucketState::by_param() const {
  std::vector<ByParam> state = pending_;
  state.resize(slots_.size());
  for (const Entry& entry : entries_) {
    for (size_t slot = 0; slot < entry.slots.size(); ++slot) {
      const torch::Tensor& tensor = entry.slots[slot];
      if (!tensor.defined()) continue;
      const BucketLayout& layout = entry.layout;
      for (size_t i = 0; i < layout.params.size(); ++i) {
        const int64_t index = layout.params[i];
        state[slot][index] = tensor.narrow(0, layout.offsets[i], numels_.at(index)).clone();
      }
    }
  }
  return state;
}

void BucketState::set_by_param(std::vector<ByParam> state) {
  entries_.clear();
  pending_ = std::move(state);
}

void BucketState::relayout(const std::vector<Bucket>& buckets) {
  bool same = entries_.size() <= buckets.size();
  for (size_t b = 0; same && b < entries_.size(); ++b) {
    same = entries_[b].slots.empty() || entries_[b].layout == buckets[b].layout;
  }
  if (!same) set_by_param(by_param());
}

int64_t BucketState::bytes() const {
  int64_t total = 0;
  for (const Entry& entry : entries_) {
    for (const torch::Tensor& tensor : entry.slots) total += tensor.defined() ? tensor.nbytes() : 0;
  }
  for (const ByParam& slot : pending_) {
    for (const auto& item : slot) total += item.second.nbytes();
  }
  return total;
}

void BucketState::clear_gaps(const Bucket& bucket, torch::Tensor& tensor) const {
  std::vector<std::pair<int64_t, int64_t>> covered;  // (offset, numel)
  for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
    covered.emplace_back(bucket.layout.offsets[i], numels_.at(bucket.layout.params[i]));
  }
  std::sort(covered.begin(), covered.end());
  int64_t at = 0;
  for (const auto& [offset, numel] : covered) {
    if (offset > at) tensor.narrow(0, at, offset - at).zero_();
    at = std::max(at, offset + numel);
  }
  if (bucket.layout.numel > at) tensor.narrow(0, at, bucket.layout.numel - at).zero_();
}

std::vector<torch::Tensor> BucketState::all(size_t slot) const {
  std::vector<torch::Tensor> tensors;
  for (const Entry& entry : entries_) {
    if (slot < entry.slots.size() && entry.slots[slot].defined()) {
      tensors.push_back(entry.slots[slot]);
    }
  }
  return tensors;
}

}  // namespace dtrain::dist::compression
