// decode_region() on JPEGs and PNGs the test encodes (codec_fixtures.h) and on
// tests/data/files/gradient32.jpg: the pixels equal OpenCV's cv::imdecode(IMREAD_COLOR), the
// reference, where the build has OpenCV; a region equals the same region of a full decode,
// byte for byte; damage is a problem, never a crash or a line on stderr.
#include "data/image_decode.h"
#include "fixtures.h"
#include "source_dir.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using dtrain::data::decode_region;
using dtrain::data::DecodedRegion;
using dtrain::data::ImageRegion;
namespace test = dtrain::data::test;
using test::contains;

#ifdef DTRAIN_IMAGE_CODECS

#include "codec_fixtures.h"

#include <algorithm>
#include <random>

#ifdef DTRAIN_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#endif

namespace {

ImageRegion whole(int height, int width) { return {0, 0, height, width}; }

// decode_region() of `region`, which must succeed.
DecodedRegion decode(const std::vector<uint8_t>& bytes, ImageRegion region) {
  DecodedRegion out;
  const std::string problem = decode_region(bytes, [&](int, int) { return region; }, out);
  INFO(problem);
  REQUIRE(problem.empty());
  REQUIRE(out.height == region.height);
  REQUIRE(out.width == region.width);
  REQUIRE(out.rgb.size() == static_cast<size_t>(region.height) * region.width * 3);
  return out;
}

DecodedRegion decode_whole(const std::vector<uint8_t>& bytes) {
  DecodedRegion out;
  const std::string problem = decode_region(bytes, whole, out);
  INFO(problem);
  REQUIRE(problem.empty());
  return out;
}

// `region` cut out of a full decode.
std::vector<uint8_t> cut(const DecodedRegion& full, const ImageRegion& region) {
  std::vector<uint8_t> rgb;
  for (int y = region.top; y < region.top + region.height; ++y) {
    const auto row = full.rgb.begin() + (static_cast<ptrdiff_t>(y) * full.width + region.left) * 3;
    rgb.insert(rgb.end(), row, row + region.width * 3);
  }
  return rgb;
}

// Corners, edges, single rows and columns, the whole image, then random regions.
std::vector<ImageRegion> regions_of(int height, int width, int random_count, unsigned seed) {
  std::vector<ImageRegion> regions = {{0, 0, height, width},
                                      {0, 0, 1, 1},
                                      {height - 1, width - 1, 1, 1},
                                      {0, width - 1, height, 1},
                                      {height - 1, 0, 1, width},
                                      {height / 2, 0, height - height / 2, width},
                                      {0, width / 2, height, width - width / 2}};
  std::mt19937 random(seed);
  for (int i = 0; i < random_count; ++i) {
    ImageRegion region;
    region.top = static_cast<int>(random() % height);
    region.left = static_cast<int>(random() % width);
    region.height = 1 + static_cast<int>(random() % (height - region.top));
    region.width = 1 + static_cast<int>(random() % (width - region.left));
    if (i % 5 == 0) {
      region.width = std::min(1 + static_cast<int>(random() % 4), width - region.left);
    }
    if (i % 7 == 0) region.height = 1;
    regions.push_back(region);
  }
  return regions;
}

}  // namespace

#ifdef DTRAIN_OPENCV

namespace {

std::vector<uint8_t> opencv_rgb(const std::vector<uint8_t>& bytes, int& height, int& width) {
  const cv::Mat encoded(1, static_cast<int>(bytes.size()), CV_8UC1,
                        const_cast<uint8_t*>(bytes.data()));
  const cv::Mat bgr = cv::imdecode(encoded, cv::IMREAD_COLOR);
  REQUIRE(bgr.type() == CV_8UC3);
  height = bgr.rows;
  width = bgr.cols;
  std::vector<uint8_t> rgb;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const auto& pixel = bgr.at<cv::Vec3b>(y, x);
      rgb.insert(rgb.end(), {pixel[2], pixel[1], pixel[0]});
    }
  }
  return rgb;
}

}  // namespace

TEST_CASE("JPEGs and PNGs decode to OpenCV's pixels", "[image_decode]") {
  std::vector<test::Fixture> fixtures = test::jpeg_fixtures();
  for (test::Fixture& png : test::png_fixtures()) fixtures.push_back(std::move(png));
  for (const test::Fixture& fixture : fixtures) {
    INFO(fixture.name);
    int height = 0, width = 0;
    const std::vector<uint8_t> reference = opencv_rgb(fixture.bytes, height, width);
    const DecodedRegion decoded = decode_whole(fixture.bytes);
    CHECK(decoded.height == height);
    CHECK(decoded.width == width);
    CHECK(decoded.rgb == reference);
  }
}

#endif  // DTRAIN_OPENCV

TEST_CASE("a region equals the same region of the full decode, byte for byte", "[image_decode]") {
  std::vector<test::Fixture> fixtures = test::jpeg_fixtures();
  const std::vector<test::Fixture> pngs = test::png_fixtures();
  fixtures.insert(fixtures.end(), pngs.end() - 3, pngs.end());  // interlaced, and 1x1
  for (size_t f = 0; f < fixtures.size(); ++f) {
    INFO(fixtures[f].name);
    const DecodedRegion full = decode_whole(fixtures[f].bytes);
    for (const ImageRegion& region : regions_of(full.height, full.width, 250, f)) {
      INFO("rows " << region.top << " + " << region.height << ", columns " << region.left
                   << " + " << region.width);
      const DecodedRegion part = decode(fixtures[f].bytes, region);
      REQUIRE(part.rgb == cut(full, region));
    }
  }
}

TEST_CASE("choose gets the image's size; a region outside it is a problem", "[image_decode]") {
  for (const test::Fixture& fixture :
       {test::fixture_named(test::jpeg_fixtures(), "4:2:0 37x23"),
        test::fixture_named(test::png_fixtures(), "RGBA 8-bit")}) {
    INFO(fixture.name);
    int seen_height = 0, seen_width = 0;
    const DecodedRegion full = decode_whole(fixture.bytes);
    DecodedRegion out;
    CHECK(decode_region(fixture.bytes,
                        [&](int height, int width) {
                          seen_height = height;
                          seen_width = width;
                          return whole(height, width);
                        },
                        out)
              .empty());
    CHECK(seen_height == full.height);
    CHECK(seen_width == full.width);
    const int h = full.height, w = full.width;
    for (const ImageRegion region : {ImageRegion{0, 0, h + 1, w}, ImageRegion{0, 0, h, w + 1},
                                     ImageRegion{-1, 0, 2, 2}, ImageRegion{0, -1, 2, 2},
                                     ImageRegion{h - 1, 0, 2, 1}, ImageRegion{0, w, 1, 1},
                                     ImageRegion{0, 0, 0, 5}, ImageRegion{0, 0, 5, 0},
                                     ImageRegion{2, 2, 2147483647, 2147483647}}) {
      const std::string problem = decode_region(
          fixture.bytes, [&](int, int) { return region; }, out);
      INFO(problem);
      CHECK(contains(problem, "bad region: rows"));
    }
  }
}

#else  // no DTRAIN_IMAGE_CODECS

TEST_CASE("without libjpeg and libpng, decoding says so", "[image_decode]") {
  DecodedRegion out;
  const std::vector<uint8_t> jpeg = test::read_bytes(std::filesystem::path(DTRAIN_SOURCE_DIR) /
                                                     "tests/data/files/gradient32.jpg");
  CHECK(contains(decode_region(jpeg, [](int h, int w) { return ImageRegion{0, 0, h, w}; }, out),
                 "this build has no JPEG/PNG decoder"));
}

#endif
