#include "dist/compression/codec.h"

#include "common/error.h"
#include "dist/compression/cast.h"
#include "dist/compression/onebit.h"
#include "dist/compression/powersgd.h"
#include "dist/compression/topk.h"

#include <fmt/format.h>

namespace dtrain::dist::compression {

std::unique_ptr<Codec> make_codec(const CompressionOptions& options,
                                  std::shared_ptr<Communicator> comm,
                                  const std::vector<torch::Tensor>& params, Share share,
                                  Roots roots) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  if (options.kind == "fp16") {
    return std::make_unique<CastCodec>(torch::kHalf, std::move(comm), share, std::move(numels),
                                       std::move(roots));
  }
  if (options.kind == "bf16") {
    return std::make_unique<CastCodec>(torch::kBFloat16, std::move(comm), share,
                                       std::move(numels), std::move(roots));
  }
  if (options.kind == "topk") {
    return std::make_unique<TopkCodec>(options, std::move(comm), share, std::move(numels));
  }
  if (options.kind == "onebit") {
    return std::make_unique<OnebitCodec>(options, std::move(comm), share, std::move(numels));
  }
  if (options.kind == "powersgd") {
    return std::make_unique<PowerSgdCodec>(options, std::move(comm), share, params);
  }
  throw UserError(fmt::format("dist.compression.kind: \"{}\" is not a codec of this build",
                              options.kind));
}

}  // namespace dtrain::dist::compression
