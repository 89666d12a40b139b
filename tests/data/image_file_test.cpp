// The completeness check of JPEG and PNG files (signature and end marker), on a real JPEG
// (tests/data/files/gradient32.jpg, 32x32, written by OpenCV) and the fixtures' PNG encoder.
#include "data/image_file.h"
#include "fixtures.h"
#include "source_dir.h"

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using dtrain::data::image_bytes_problem;
using dtrain::data::image_file_problem;
using dtrain::data::kImageTailBytes;
namespace test = dtrain::data::test;
using test::contains;
namespace fs = std::filesystem;

namespace {

std::vector<uint8_t> gradient_jpeg() {
  const fs::path path = fs::path(DTRAIN_SOURCE_DIR) / "tests/data/files/gradient32.jpg";
  std::vector<uint8_t> bytes = test::read_bytes(path);
  REQUIRE(bytes.size() > 300);
  return bytes;
}

std::vector<uint8_t> cut(std::vector<uint8_t> bytes, size_t size) {
  bytes.resize(size);
  return bytes;
}

std::vector<uint8_t> concat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST_CASE("complete JPEG and PNG files pass, padding and short trailers included") {
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  const std::vector<uint8_t> png = test::png_rgb(4, 3, test::solid_rgb(4, 3, 9, 8, 7));
  CHECK(image_bytes_problem(jpeg).empty());
  CHECK(image_bytes_problem(png).empty());
  CHECK(image_bytes_problem(concat(jpeg, std::vector<uint8_t>(100, 0))).empty());
  CHECK(image_bytes_problem(concat(png, {'\n'})).empty());
}

TEST_CASE("a JPEG cut anywhere after its header is truncated") {
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  // Cuts inside the scan data (from byte 282): OpenCV 4.6 decodes every one of them into a
  // 32x32 image without an error.
  for (size_t size = jpeg.size() - 1; size > 296; size -= 7) {
    INFO("first " << size << " bytes");
    CHECK(contains(image_bytes_problem(cut(jpeg, size)),
                   "truncated: no JPEG end-of-image marker (FF D9)"));
  }
  // Too much trailing data: the marker is further back than the tail that is searched.
  const std::vector<uint8_t> long_trailer(kImageTailBytes, 0);
  CHECK(contains(image_bytes_problem(concat(jpeg, long_trailer)), "truncated"));
}

TEST_CASE("a JPEG whose last FF D9 is an embedded thumbnail's is truncated") {
  // SOI, an APP1 segment holding a whole (tiny) JPEG, then the main image's scan, cut.
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  std::vector<uint8_t> file = {0xff, 0xd8, 0xff, 0xe1, 0x00, 0x00};
  file = concat(file, jpeg);  // the thumbnail, ending in FF D9
  file = concat(file, {0xff, 0xda, 0x00, 0x08, 0x01, 0x01, 0x00, 0x00, 0x3f, 0x00, 0x12, 0x34});
  CHECK(contains(image_bytes_problem(file), "belongs to an embedded thumbnail"));
}

TEST_CASE("a PNG without its IEND chunk is truncated") {
  const std::vector<uint8_t> png = test::png_rgb(8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  CHECK(contains(image_bytes_problem(cut(png, png.size() - 12)),
                 "truncated: no PNG IEND chunk"));
  CHECK(contains(image_bytes_problem(cut(png, png.size() / 2)), "truncated"));
  CHECK(contains(image_bytes_problem(cut(png, 8)), "truncated"));
}

TEST_CASE("files that are not JPEG or PNG, or empty, say so") {
  const std::vector<uint8_t> html = {'<', 'h', 't', 'm', 'l', '>', '4', '0', '4'};
  CHECK(image_bytes_problem(html) ==
        "not a JPEG or PNG: it starts with 3c 68 74 6d (a JPEG starts with ff d8 ff, a PNG "
        "with 89 50 4e 47)");
  CHECK(image_bytes_problem({}) == "empty file");
  CHECK(contains(image_bytes_problem({0xff, 0xd8}), "not a JPEG or PNG: it starts with ff d8"));
}

TEST_CASE("the file check reads only the ends and agrees with the whole-file check") {
  test::TempDir dir;
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  // A JPEG of several tails' length: a large APP1 segment before the gradient's bytes.
  std::vector<uint8_t> large = {0xff, 0xd8, 0xff, 0xe1, 0x00, 0x00};
  large = concat(concat(large, std::vector<uint8_t>(3 * kImageTailBytes, 0)), jpeg);
  const std::vector<std::vector<uint8_t>> cases = {
      jpeg, cut(jpeg, 250), {}, {'G', 'I', 'F', '8', '9', 'a'}, large, cut(large, large.size() - 9),
      test::png_rgb(2, 2, test::solid_rgb(2, 2, 0, 0, 0))};
  for (size_t i = 0; i < cases.size(); ++i) {
    const fs::path path = dir.path() / ("f" + std::to_string(i));
    test::write_bytes(path, cases[i]);
    INFO("case " << i);
    CHECK(image_file_problem(path.string()) == image_bytes_problem(cases[i]));
  }
  CHECK(image_bytes_problem(large).empty());
  CHECK(contains(image_bytes_problem(cut(large, large.size() - 9)), "truncated"));
  CHECK(contains(image_file_problem((dir.path() / "missing.jpg").string()),
                 "cannot open: No such file or directory"));
}
