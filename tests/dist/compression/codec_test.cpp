// The codecs' messages on one rank, float64: what each encodes and how it decodes (top-k keeps
// the largest elements, one-bit a sign and a mean magnitude per chunk, the fp16/bf16 scale is
// a power of two that bounds the sum), and the DGC sparsity schedule.
#include "dist/compression/cast.h"
#include "dist/compression/onebit.h"
#include "dist/compression/topk.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <cmath>

using namespace dtrain::dist::compression;
using dtrain::dist::CompressionOptions;
using equivalence::device;
using equivalence::world;

namespace {

torch::Tensor decode_own(const GatheredCodec& codec, const torch::Tensor& input) {
  return codec.decode_sum(codec.encode(input, 0).unsqueeze(0), input.numel(),
                          {0, input.numel()}, input);
}

torch::TensorOptions f64() { return torch::TensorOptions(torch::kFloat64).device(device()); }

}  // namespace

TEST_CASE("topk sends the k largest magnitudes and decodes them in place", "[codec]") {
  CompressionOptions options;
  options.kind = "topk";
  options.ratio = 0.3;
  TopkCodec codec(options, world(), Share::kWhole, {10});
  const torch::Tensor input =
      torch::tensor({0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 4.0, -0.05, 0.6, -0.7}, f64());
  // k = ceil(0.3 x 10) = 3: -5, 4, 3.
  const torch::Tensor expected =
      torch::tensor({0.0, -5.0, 0.0, 3.0, 0.0, 0.0, 4.0, 0.0, 0.0, 0.0}, f64());
  CHECK(torch::equal(decode_own(codec, input), expected));
  // Message: 3 float64 values and 3 int32 indices.
  CHECK(codec.encode(input, 0).numel() == 3 * 8 + 3 * 4);
}

TEST_CASE("topk's sparsity warm-up falls exponentially from 25% to the ratio", "[codec]") {
  CHECK(topk_count(1000, 0.01, 0, 4) == 250);
  CHECK(topk_count(1000, 0.01, 2, 4) == 50);  // 0.25 x (0.04)^0.5 = 0.05
  CHECK(topk_count(1000, 0.01, 4, 4) == 10);
  CHECK(topk_count(1000, 0.01, 0, 0) == 10);
  CHECK(topk_count(10, 1e-6, 0, 0) == 1);  // never nothing
}

TEST_CASE("onebit decodes to the chunk's mean magnitude times the sign", "[codec]") {
  CompressionOptions options;
  options.kind = "onebit";
  options.chunk = 8;
  OnebitCodec codec(options, world(), Share::kWhole, {11});
  // Two chunks: 8 elements, then 3 (padded to 8 in the message).
  const torch::Tensor input =
      torch::tensor({1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0, 0.5, -1.0, 0.0}, f64());
  const torch::Tensor expected =
      torch::tensor({4.5, -4.5, 4.5, -4.5, 4.5, -4.5, 4.5, -4.5, 0.5, -0.5, 0.5}, f64());
  CHECK(torch::allclose(decode_own(codec, input), expected, 0.0, 1e-15));
  // Two float64 scales and 16 bits.
  CHECK(codec.encode(input, 0).numel() == 2 * 8 + 2);
}

TEST_CASE("onebit never pads a chunk past its bucket", "[codec]") {
  CHECK(onebit_chunk(131050, 1 << 24) == 131056);  // SimpleCNN's one bucket
  CHECK(onebit_chunk(131050, 1024) == 1024);
  CHECK(onebit_chunk(3, 64) == 8);
  CompressionOptions options;
  options.kind = "onebit";
  options.chunk = 1 << 24;
  OnebitCodec codec(options, world(), Share::kWhole, {11});
  const torch::Tensor input =
      torch::tensor({1.0, -2.0, 3.0, -4.0, 5.0, -6.0, 7.0, -8.0, 0.5, -1.0, 0.0}, f64());
  // One float64 scale and 16 bits, not 2^24 of them.
  CHECK(codec.encode(input, 0).numel() == 8 + 2);
  const double mean = input.abs().mean().item<double>();
  const torch::Tensor expected =
      torch::where(input.ge(0), torch::full_like(input, mean), torch::full_like(input, -mean));
  CHECK(torch::allclose(decode_own(codec, input), expected, 0.0, 1e-15));
}

TEST_CASE("onebit packs signs of long buckets exactly", "[codec]") {
  CompressionOptions options;
  options.kind = "onebit";
  options.chunk = 64;
  OnebitCodec codec(options, world(), Share::kWhole, {1000});
  torch::manual_seed(3);
  const torch::Tensor input = torch::randn({1000}, f64());
  const torch::Tensor decoded = decode_own(codec, input);
  CHECK(torch::equal(decoded.ge(0), input.ge(0)));
  // Each chunk's decoded magnitudes are its mean magnitude, so the L1 norms agree.
  CHECK(decoded.abs().sum().item<double>() == Approx(input.abs().sum().item<double>()));
}

TEST_CASE("onebit packs element 8i + b into bit b of byte i, -0.0 as positive", "[codec]") {
  torch::manual_seed(5);
  torch::Tensor input = torch::randn({64 * 8}, f64());
  input[3] = -0.0;
  input[9] = 0.0;
  const torch::Tensor packed = dtrain::dist::compression::pack_signs(input).cpu();
  REQUIRE(packed.numel() == 64);
  const torch::Tensor values = input.cpu();
  const auto* bytes = packed.data_ptr<uint8_t>();
  for (int64_t e = 0; e < values.numel(); ++e) {
    const bool bit = (bytes[e / 8] >> (e % 8)) & 1;
    CHECK(bit == (values[e].item<double>() >= 0.0));
  }
}

TEST_CASE("the fp16/bf16 scale is a power of two that bounds the sum by 2^15", "[codec]") {
  for (const double magnitude : {1e-30, 1e-3, 1.0, 7.0e4, 3.0e38}) {
    INFO("magnitude " << magnitude);
    const double scale = cast_scale(torch::tensor({magnitude}, f64())).item<double>();
    int exponent = 0;
    CHECK(std::frexp(scale, &exponent) == 0.5);  // a power of two
    CHECK(scale * magnitude <= 32768.0);
    if (magnitude > 1e-10) CHECK(scale * magnitude > 16384.0);  // not below half the bound
  }
  CHECK(cast_scale(torch::tensor({INFINITY}, f64())).item<double>() == 1.0);
  CHECK(std::isfinite(cast_scale(torch::tensor({0.0}, f64())).item<double>()));
}
