#include "dist/compression/gathered.h"

namespace dtrain::dist::compression {

std::unique_ptr<Work> GatheredCodec::launch(Bucket& bucket, int64_t step) {
  torch::Tensor& flat = bucket.flat;
  torch::Tensor* residual = error_feedback_ ? &state_.at(bucket, 0) : nullptr;
  if (residual) flat.add_(*residual);
  const torch::Tensor message = encode(flat, step);
  // This rank's message alone decodes to what it sent; the rest of the input stays.
  if (residual) {
    torch::sub_out(*residual, flat,
                   decode_sum(message.unsqueeze(0), flat.numel(), {0, flat.numel()}, flat));
    state_.clear_gaps(bucket, *residual);
  }
  if (static_cast<int64_t>(gathered_.size()) <= bucket.index) gathered_.resize(bucket.index + 1);
  torch::Tensor& gathered = gathered_[bucket.index];
  gathered = torch::empty({comm_->size() * message.numel()}, message.options());
  return comm_->all_gather(message, gathered);
}

void GatheredCodec::finish(Bucket& bucket, torch::Tensor kept) {
  const torch::Tensor& gathered = gathered_.at(bucket.index);
  torch::Tensor sum = decode_sum(gathered.view({comm_->size(), -1}), bucket.flat.numel(),
                                 this->kept(bucket), bucket.flat);
  kept.copy_(sum.div_(static_cast<double>(comm_->size())));
}

torch::Tensor to_bytes(const torch::Tensor& tensor) {
  return tensor.contiguous().view(torch::kUInt8).reshape({-1});
}

torch::Tensor from_bytes(const torch::Tensor& bytes, torch::ScalarType dtype) {
  // A fresh copy: a view as a wider type needs every stride and the offset aligned to it.
  return bytes.clone(at::MemoryFormat::Contiguous).view(dtype);
}

}  // namespace dtrain::dist::compression
