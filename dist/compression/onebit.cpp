#include "dist/compression/onebit.h"

#include <algorithm>

namespace dtrain::dist::compression {

namespace {

// Bit b of a packed byte holds element 8i + b: weights 2^b, made on the device (no copy from
// the host in the step).
torch::Tensor bit_weights(const torch::Device& device) {
  return torch::exp2(torch::arange(8, torch::TensorOptions(torch::kFloat32).device(device)))
      .to(torch::kUInt8);
}

int64_t chunks_in(int64_t numel, int64_t chunk) { return (numel + chunk - 1) / chunk; }

}  // namespace

OnebitCodec::OnebitCodec(const CompressionOptions& options, std::shared_ptr<Communicator> comm,
                         Share share, std::vector<int64_t> numels)
    : GatheredCodec(std::move(comm), share,
                    options.error_feedback ? std::vector<std::string>{"residual"}
                                           : std::vector<std::string>{},
                    std::move(numels)),
      chunk_(options.chunk) {}

torch::Tensor OnebitCodec::encode(const torch::Tensor& input, int64_t step) const {
  (void)step;
  return onebit_encode(input, onebit_chunk(input.numel(), chunk_));
}

torch::Tensor OnebitCodec::decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                                      const torch::Tensor& like) const {
  return onebit_decode_sum(messages, numel, range, like, onebit_chunk(numel, chunk_));
}

int64_t onebit_chunk(int64_t numel, int64_t chunk) {
  return std::min(chunk, std::max<int64_t>(8, (numel + 7) / 8 * 8));
}

torch::Tensor onebit_encode(const torch::Tensor& input, int64_t chunk) {
  const int64_t chunks = chunks_in(input.numel(), chunk);
  const torch::Tensor padded = torch::constant_pad_nd(input, {0, chunks * chunk - input.numel()});
  // Mean magnitude over the chunk's real elements (the padding adds nothing to the sum).
  torch::Tensor counts = torch::full({chunks}, static_cast<double>(chunk), input.options());
  counts[-1] = static_cast<double>(input.numel() - (chunks - 1) * chunk);
  const torch::Tensor scales = padded.view({chunks, chunk}).abs().sum(1).div_(counts);
  return torch::cat({to_bytes(scales), pack_signs(padded)});
}

torch::Tensor pack_signs(const torch::Tensor& input) {
  // Each sign a byte of 0 or 1, eight bytes an int64 (little-endian: element 8i + b in its
  // byte b). Multiplying by 2^56 + 2^49 + ... + 2^7 moves byte b's bit to bit 56 + b, and no
  // other product reaches bits 56-63 or carries into them (they land at or above bit 64, or
  // at distinct bits below 56): the top byte is the eight signs packed. Three passes over an
  // eighth of the elements, where a byte-wise weighted sum takes a reduction over all of them.
  const torch::Tensor bytes = input.ge(0).view(torch::kUInt8).view(torch::kInt64);
  constexpr int64_t kGather = 0x0102040810204080;
  return torch::bitwise_right_shift(bytes.mul(kGather), 56).to(torch::kUInt8);
}

torch::Tensor onebit_decode_sum(const torch::Tensor& messages, int64_t numel, Range range,
                                const torch::Tensor& like, int64_t chunk) {
  const int64_t ranks = messages.size(0);
  const int64_t chunks = chunks_in(numel, chunk);
  const int64_t scale_bytes = chunks * like.element_size();
  // The chunks [first, first + count) that cover the range.
  const int64_t first = range.offset / chunk;
  const int64_t count = chunks_in(range.end(), chunk) - first;
  const torch::Tensor scales = from_bytes(messages.narrow(1, 0, scale_bytes), like.scalar_type())
                                   .narrow(1, first, count);  // [ranks, count]
  const torch::Tensor packed =
      messages.narrow(1, scale_bytes + first * chunk / 8, count * chunk / 8);
  const torch::Tensor bits = packed.unsqueeze(2).bitwise_and(bit_weights(like.device())).ne(0);
  // Each element its chunk's scale, signed by its bit, in one pass; summed over the ranks.
  const torch::Tensor scale = scales.unsqueeze(2);  // [ranks, count, 1]
  const torch::Tensor sum =
      torch::where(bits.view({ranks, count, chunk}), scale, scale.neg()).sum(0);
  return sum.view({-1}).narrow(0, range.offset - first * chunk, range.numel);
}

}  // namespace dtrain::dist::compression
