#include "dist/ps/push_codec.h"

#include "common/error.h"
#include "dist/compression/cast.h"
#include "dist/compression/gathered.h"
#include "dist/compression/onebit.h"
#include "dist/compression/topk.h"

#include <chrono>
#include <cmath>
#include <cstring>

namespace dtrain::dist::ps {

namespace {

using Clock = std::chrono::steady_clock;
using compression::from_bytes;
using compression::Range;
using compression::to_bytes;

bool is_cast(Encoding encoding) {
  return encoding == Encoding::kFp16 || encoding == Encoding::kBf16;
}

torch::ScalarType cast_type(Encoding encoding) {
  return encoding == Encoding::kFp16 ? torch::kHalf : torch::kBFloat16;
}

// The payload's size for a chunk of `numel` elements of `element_size` bytes: a message of
// another size is no push of this chunk.
int64_t payload_bytes(const PushHeader& header, int64_t numel, int64_t element_size) {
  if (header.encoding == Encoding::kTopk && header.parameter < 1) return -1;  // k >= 1
  if (header.encoding == Encoding::kOnebit &&
      (header.parameter < 8 || header.parameter % 8 != 0)) {
    return -1;  // a scale covers whole bytes of signs
  }
  switch (header.encoding) {
    case Encoding::kDense: return numel * element_size;
    case Encoding::kFp16:
    case Encoding::kBf16: return element_size + numel * 2;
    case Encoding::kTopk: return header.parameter * (element_size + 4);
    case Encoding::kOnebit: {
      const int64_t scales = (numel + header.parameter - 1) / header.parameter;
      return scales * element_size + scales * header.parameter / 8;
    }
  }
  return -1;
}

}  // namespace

PushEncoder::PushEncoder(const CompressionOptions& options, std::vector<int64_t> numels)
    : options_(options),
      state_(options.kind == "topk"     ? compression::topk_slots(options)
             : options.has_residuals() ? std::vector<std::string>{"residual"}
                                       : std::vector<std::string>{},
             std::move(numels)) {
  DTRAIN_CHECK(options_.kind != "powersgd" && options_.enabled(),
               "ps: no messages form of codec \"{}\"", options_.kind);
}

PushHeader PushEncoder::header(int64_t numel, int64_t codec_step) const {
  if (codec_step < 0) return {Encoding::kDense, 0};
  if (options_.kind == "fp16") return {Encoding::kFp16, 0};
  if (options_.kind == "bf16") return {Encoding::kBf16, 0};
  if (options_.kind == "topk") {
    return {Encoding::kTopk, compression::topk_count(numel, options_.ratio, codec_step,
                                                     options_.sparsity_warmup_steps)};
  }
  return {Encoding::kOnebit, options_.chunk};
}

torch::Tensor PushEncoder::payload(const torch::Tensor& input, const PushHeader& header) const {
  switch (header.encoding) {
    case Encoding::kDense: return to_bytes(input);
    case Encoding::kFp16:
    case Encoding::kBf16: {
      const torch::Tensor scale = compression::cast_scale(input.abs().max().reshape({1}));
      const torch::Tensor cast = input.mul(scale).to(cast_type(header.encoding));
      return torch::cat({to_bytes(scale), to_bytes(cast)});
    }
    case Encoding::kTopk: return compression::topk_encode(input, header.parameter);
    case Encoding::kOnebit: return compression::onebit_encode(input, header.parameter);
  }
  return {};
}

torch::Tensor decode_payload(const PushHeader& header, const torch::Tensor& payload,
                             const torch::Tensor& like) {
  const int64_t numel = like.numel();
  const Range whole{0, numel};
  switch (header.encoding) {
    case Encoding::kDense: return from_bytes(payload, like.scalar_type());
    case Encoding::kFp16:
    case Encoding::kBf16: {
      const int64_t scale_bytes = like.element_size();
      const torch::Tensor scale = from_bytes(payload.narrow(0, 0, scale_bytes), like.scalar_type());
      return from_bytes(payload.narrow(0, scale_bytes, numel * 2), cast_type(header.encoding))
          .to(like.scalar_type())
          .div_(scale);
    }
    case Encoding::kTopk: return compression::topk_decode_sum(payload.unsqueeze(0), whole, like);
    case Encoding::kOnebit:
      return compression::onebit_decode_sum(payload.unsqueeze(0), numel, whole, like,
                                            header.parameter);
  }
  return {};
}

std::vector<torch::Tensor> PushEncoder::encode(int64_t bucket, const BucketLayout& layout,
                                               const torch::Tensor& flat,
                                               const std::vector<Range>& chunks, int64_t step) {
  const auto start = Clock::now();
  const int64_t codec_step = step - options_.warmup_steps;
  const Bucket view{layout, flat, bucket};
  torch::Tensor input = flat;
  torch::Tensor* residual = nullptr;
  torch::Tensor* velocity = nullptr;
  if (codec_step >= 0 && !state_.slots().empty()) {
    if (options_.kind == "topk" && options_.momentum > 0) {
      // DGC's momentum correction, as TopkCodec: u = m u + g, accumulated into the residual.
      velocity = &state_.at(view, 1);
      velocity->mul_(options_.momentum).add_(flat);
      input = *velocity;
    }
    residual = &state_.at(view, 0);
    input = input + *residual;  // a copy: the gradients themselves stay as backward left them
  }
  std::vector<PushHeader> headers;
  std::vector<torch::Tensor> payloads;
  for (const Range& range : chunks) {
    const torch::Tensor chunk = input.narrow(0, range.offset, range.numel);
    headers.push_back(header(range.numel, codec_step));
    payloads.push_back(payload(chunk, headers.back()));
    if (residual) {  // what this chunk's message did not carry
      torch::Tensor kept = residual->narrow(0, range.offset, range.numel);
      torch::sub_out(kept, chunk, decode_payload(headers.back(), payloads.back(), chunk));
    }
  }
  if (residual) {
    state_.clear_gaps(view, *residual);
    // Momentum factor masking: the velocity forgets what was sent (the residual is zero
    // exactly there, or where the velocity is).
    if (velocity) velocity->masked_fill_(residual->eq(0), 0.0);
  }
  // One copy to the host for the bucket's messages; MPI sends from there.
  const torch::Tensor host = torch::cat(payloads).to(torch::kCPU);
  std::vector<torch::Tensor> messages;
  int64_t at = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t bytes = payloads[c].numel();
    torch::Tensor message = torch::empty({kPushHeaderBytes + bytes}, torch::kUInt8);
    std::memcpy(message.data_ptr(), &headers[c], kPushHeaderBytes);
    message.narrow(0, kPushHeaderBytes, bytes).copy_(host.narrow(0, at, bytes));
    at += bytes;
    current_.raw_bytes += static_cast<double>(chunks[c].numel * flat.element_size());
    current_.wire_bytes += static_cast<double>(message.numel());
    messages.push_back(std::move(message));
  }
  current_.encode_ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  return messages;
}

void PushEncoder::end_step() {
  last_ = current_;
  current_ = Record();
}

Stats PushEncoder::stats() const {
  double residual_sq = 0.0;
  for (const torch::Tensor& residual : residuals()) {
    residual_sq += residual.pow(2).sum().item<double>();
  }
  // A step without pushes (a hierarchy's other workers) sends nothing either way.
  const double ratio = last_.wire_bytes > 0 ? last_.raw_bytes / last_.wire_bytes : 1.0;
  return {{"comm/compression_ratio", ratio},
          {"comm/encode_ms", last_.encode_ms},
          {"comm/residual_norm", std::sqrt(residual_sq)},
          {"memory/codec_state_mb", static_cast<double>(state_.bytes()) / (1 << 20)}};
}

void decode_push(const torch::Tensor& message, torch::Tensor& dense) {
  DTRAIN_CHECK(message.numel() >= kPushHeaderBytes, "ps: a push of {} bytes has no header",
               message.numel());
  PushHeader header;
  std::memcpy(&header, message.data_ptr(), kPushHeaderBytes);
  const int64_t bytes = message.numel() - kPushHeaderBytes;
  const int64_t expected = payload_bytes(header, dense.numel(), dense.element_size());
  DTRAIN_CHECK(bytes == expected && (!is_cast(header.encoding) || header.parameter == 0),
               "ps: a push of encoding {} (parameter {}) for {} elements carries {} bytes, not {}",
               static_cast<int64_t>(header.encoding), header.parameter, dense.numel(), bytes,
               expected);
  dense.copy_(decode_payload(header, message.narrow(0, kPushHeaderBytes, bytes), dense));
}

}  // namespace dtrain::dist::ps
