// Decode rate of a 500x375 quality-90 4:2:0 JPEG (ImageNet's typical size) on one thread:
// the whole image against regions of half and a quarter of its area, as a random-resized crop
// asks for. A measurement, not a check: hidden from the default run, and bounded in time.
#include "data/image_decode.h"

#include <catch2/catch.hpp>

#ifdef DTRAIN_IMAGE_CODECS

#include "codec_fixtures.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#ifdef DTRAIN_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#endif

using dtrain::data::decode_region;
using dtrain::data::DecodedRegion;
using dtrain::data::ImageRegion;
namespace test = dtrain::data::test;
using Clock = std::chrono::steady_clock;

namespace {

// Images per second of `decode_one` (called with the image's index), over about `seconds`.
template <typename Decode>
double rate(double seconds, Decode decode_one) {
  const auto start = Clock::now();
  int count = 0;
  std::chrono::duration<double> elapsed{};
  do {
    decode_one(count++);
    elapsed = Clock::now() - start;
  } while (elapsed.count() < seconds);
  return count / elapsed.count();
}

}  // namespace

TEST_CASE("decode rate of a 500x375 JPEG, whole and regions", "[.][benchmark]") {
  constexpr int kHeight = 375, kWidth = 500;
  const std::vector<uint8_t> jpeg =
      test::jpeg_file(kWidth, kHeight, {}, test::pattern(kWidth, kHeight, 3, 1));
  std::printf("500x375 4:2:0 quality 90: %zu bytes (%.2f bits per pixel)\n", jpeg.size(),
              jpeg.size() * 8.0 / (kWidth * kHeight));
  for (const double area : {1.0, 0.5, 0.25}) {
    // The image's aspect ratio, at random positions (a fixed sequence of them).
    const int height = static_cast<int>(std::lround(kHeight * std::sqrt(area)));
    const int width = static_cast<int>(std::lround(kWidth * std::sqrt(area)));
    std::mt19937 random(3);
    DecodedRegion out;
    const double per_s = rate(1.0, [&](int) {
      const ImageRegion region{static_cast<int>(random() % (kHeight - height + 1)),
                               static_cast<int>(random() % (kWidth - width + 1)), height, width};
      REQUIRE(decode_region(jpeg, [&](int, int) { return region; }, out).empty());
    });
    std::printf("decode_region, %3.0f%% of the area (%dx%d): %7.0f images/s\n", area * 100,
                width, height, per_s);
  }
#ifdef DTRAIN_OPENCV
  const cv::Mat encoded(1, static_cast<int>(jpeg.size()), CV_8UC1,
                        const_cast<uint8_t*>(jpeg.data()));
  const double per_s =
      rate(1.0, [&](int) { REQUIRE(!cv::imdecode(encoded, cv::IMREAD_COLOR).empty()); });
  std::printf("cv::imdecode, whole image:                   %7.0f images/s\n", per_s);
#endif
}

#endif  // DTRAIN_IMAGE_CODECS
