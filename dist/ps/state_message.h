// The optimizer state of one server's pieces as one message (kStateTag), both ways: to the
// worker that writes a checkpoint, and from the worker that resumes one, which sends the
// server's parameters first. Pieces in plan order (PsPlan::pieces of the server's chunks);
// each piece's state is its fields as dist/ps/piece_state.h encodes them, empty where the
// optimizer keeps none (yet).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace dtrain::dist::ps {

struct StateMessage {
  torch::Tensor params;             // the server's chunks back to back; undefined: none
  std::vector<std::string> pieces;  // per piece, its state's bytes
};

inline torch::Tensor encode(const StateMessage& message) {
  std::string out;
  const auto put = [&out](const void* data, size_t bytes) {
    out.append(static_cast<const char*>(data), bytes);
  };
  const auto put_size = [&put](int64_t n) { put(&n, sizeof(n)); };
  const int64_t param_bytes =
      message.params.defined() ? static_cast<int64_t>(message.params.nbytes()) : 0;
  put_size(param_bytes);
  if (param_bytes > 0) put(message.params.contiguous().data_ptr(), param_bytes);
  put_size(static_cast<int64_t>(message.pieces.size()));
  for (const std::string& piece : message.pieces) {
    put_size(static_cast<int64_t>(piece.size()));
    put(piece.data(), piece.size());
  }
  torch::Tensor bytes = torch::empty({static_cast<int64_t>(out.size())}, torch::kUInt8);
  std::memcpy(bytes.data_ptr(), out.data(), out.size());
  return bytes;
}

// `params`: where the parameters go (its size must match), or undefined to skip them.
inline StateMessage decode(const torch::Tensor& bytes, torch::Tensor params) {
  const char* at = static_cast<const char*>(bytes.data_ptr());
  const char* end = at + bytes.numel();
  const auto take_size = [&]() {
    int64_t n = 0;
    TORCH_CHECK(at + sizeof(n) <= end, "ps state message: truncated");
    std::memcpy(&n, at, sizeof(n));
    at += sizeof(n);
    return n;
  };
  StateMessage message;
  const int64_t param_bytes = take_size();
  TORCH_CHECK(at + param_bytes <= end, "ps state message: truncated");
  if (params.defined() && param_bytes > 0) {
    TORCH_CHECK(static_cast<int64_t>(params.nbytes()) == param_bytes,
                "ps state message: parameters of ", param_bytes, " bytes, expected ",
                params.nbytes());
    std::memcpy(params.data_ptr(), at, param_bytes);
    message.params = params;
  }
  at += param_bytes;
  const int64_t count = take_size();
  for (int64_t i = 0; i < count; ++i) {
    const int64_t n = take_size();
    TORCH_CHECK(at + n <= end, "ps state message: truncated");
    message.pieces.emplace_back(at, static_cast<size_t>(n));
    at += n;
  }
  return message;
}

}  // namespace dtrain::dist::ps
