// The image-folder dataset on tiny PNGs written by the test (its own encoder, via zlib).
#include "common/error.h"
#include "data/dataset.h"
#include "fixtures.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using dtrain::UserError;
using dtrain::data::DataOptions;
using dtrain::data::open_dataset;
using dtrain::data::Split;
namespace test = dtrain::data::test;
using test::contains;
using test::open_error;
namespace fs = std::filesystem;

namespace {

DataOptions folder_options(const test::TempDir& dir, int64_t image_size) {
  DataOptions options;
  options.dataset = "image_folder";
  options.path = dir.str();
  options.image_size = image_size;
  return options;
}


}  // namespace

#ifdef DTRAIN_OPENCV

namespace {

void write_png(const fs::path& path, int width, int height, const std::vector<uint8_t>& rgb) {
  test::write_bytes(path, test::png_rgb(width, height, rgb));
}

// Normalised value of byte `v` in RGB channel `c` with the ImageNet statistics.
float imagenet(int c, int v) {
  const double mean[3] = {0.485, 0.456, 0.406};
  const double std[3] = {0.229, 0.224, 0.225};
  return static_cast<float>((v / 255.0 - mean[c]) / std[c]);
}

// Every pixel of channel c of `out` [3, size, size] equals imagenet(c, rgb[c]).
bool is_solid(const std::vector<float>& out, int64_t size, const int (&rgb)[3]) {
  for (size_t j = 0; j < out.size(); ++j) {
    const int c = static_cast<int>(j / static_cast<size_t>(size * size));
    if (std::abs(out[j] - imagenet(c, rgb[c])) > 1e-5f) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("image folder: classes, files, BGR to RGB, train and eval transforms") {
  test::TempDir dir;
  const fs::path train = dir.path() / "train";
  write_png(train / "cat" / "a.png", 40, 30, test::solid_rgb(40, 30, 255, 0, 0));
  write_png(train / "cat" / "B.PNG", 20, 50, test::solid_rgb(20, 50, 0, 255, 0));
  test::write_bytes(train / "cat" / "notes.txt", {'h', 'i'});
  write_png(train / "dog" / "c.png", 33, 33, test::solid_rgb(33, 33, 0, 0, 255));
  std::vector<uint8_t> gradient;
  for (int y = 0; y < 40; ++y) {
    for (int x = 0; x < 40; ++x) {
      gradient.insert(gradient.end(),
                      {static_cast<uint8_t>(x * 6), static_cast<uint8_t>(y * 6), 128});
    }
  }
  write_png(train / "dog" / "sub" / "d.png", 40, 40, gradient);
  // val/: top half black, bottom half white, 16 wide and 32 tall.
  std::vector<uint8_t> halves = test::solid_rgb(16, 16, 0, 0, 0);
  const std::vector<uint8_t> white = test::solid_rgb(16, 16, 255, 255, 255);
  halves.insert(halves.end(), white.begin(), white.end());
  write_png(dir.path() / "val" / "cat" / "x.png", 40, 30, test::solid_rgb(40, 30, 255, 0, 0));
  write_png(dir.path() / "val" / "dog" / "y.jpeg.PNG", 16, 32, halves);

  const auto dataset = open_dataset(folder_options(dir, 16), Split::kTrain);
  REQUIRE(dataset->size() == 4);
  CHECK(dataset->num_classes() == 2);
  const auto shape = dataset->shape();
  CHECK((shape.channels == 3 && shape.height == 16 && shape.width == 16));
  std::vector<float> out(3 * 16 * 16);
  // Sorted within a class: "B.PNG" < "a.png".
  for (uint64_t seed = 0; seed < 5; ++seed) {
    CHECK(dataset->get(0, out.data(), seed) == 0);
    CHECK(is_solid(out, 16, {0, 255, 0}));
    CHECK(dataset->get(1, out.data(), seed) == 0);
    CHECK(is_solid(out, 16, {255, 0, 0}));
    CHECK(dataset->get(2, out.data(), seed) == 1);
    CHECK(is_solid(out, 16, {0, 0, 255}));
  }
  // Random-resized-crop + flip: the seed alone decides; red grows with x unless flipped.
  int increasing = 0;
  int decreasing = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    CHECK(dataset->get(3, out.data(), seed) == 1);
    std::vector<float> again(out.size());
    dataset->get(3, again.data(), seed);
    REQUIRE(again == out);
    increasing += out[15] > out[0];
    decreasing += out[15] < out[0];
  }
  CHECK(increasing > 0);
  CHECK(decreasing > 0);

  // Eval: shorter side to round(14 / 0.875) = 16 (so 16x32), center crop 14 from row 9:
  // rows 0-6 black, 7-13 white.
  const auto eval = open_dataset(folder_options(dir, 14), Split::kTest);
  REQUIRE(eval->size() == 2);
  std::vector<float> small(3 * 14 * 14);
  CHECK(eval->get(0, small.data(), 0) == 0);
  CHECK(is_solid(small, 14, {255, 0, 0}));
  CHECK(eval->get(1, small.data(), 0) == 1);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 14; ++y) {
      for (int x = 0; x < 14; ++x) {
        REQUIRE(small[static_cast<size_t>((c * 14 + y) * 14 + x)] ==
                Approx(imagenet(c, y < 7 ? 0 : 255)).margin(1e-5));
      }
    }
  }
}

TEST_CASE("image folder: a file that does not decode is named when it is loaded") {
  test::TempDir dir;
  write_png(dir.path() / "train" / "a" / "ok.png", 8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  const fs::path bad = dir.path() / "train" / "a" / "bad.jpg";
  test::write_bytes(bad, {0xff, 0xd8, 0xff, 0xe0, 'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'g'});
  const auto dataset = open_dataset(folder_options(dir, 8), Split::kTrain);
  REQUIRE(dataset->size() == 2);
  std::vector<float> out(3 * 8 * 8);
  try {
    dataset->get(0, out.data(), 0);
    FAIL("a corrupt JPEG decoded");
  } catch (const UserError& e) {
    CHECK(contains(e.what(), bad.string() + ": cannot decode"));
  }
  CHECK(dataset->get(1, out.data(), 0) == 0);
}

TEST_CASE("image folder: missing folders, no classes, empty classes, mismatched val") {
  test::TempDir dir;
  const DataOptions options = folder_options(dir, 8);
  CHECK(contains(open_error(options), (dir.path() / "train").string() + ": does not exist"));
  test::write_bytes(dir.path() / "train", {'x'});
  CHECK(contains(open_error(options),
                 (dir.path() / "train").string() + ": not a folder (it is a file)"));
  fs::remove(dir.path() / "train");

  fs::create_directories(dir.path() / "train");
  CHECK(contains(open_error(options), "train: no class sub-folders"));

  write_png(dir.path() / "train" / "a" / "x.png", 8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  fs::create_directories(dir.path() / "train" / "b");
  test::write_bytes(dir.path() / "train" / "b" / "readme.txt", {'x'});
  CHECK(contains(open_error(options),
                 (dir.path() / "train" / "b").string() + ": no .jpg, .jpeg or .png files"));

  write_png(dir.path() / "train" / "b" / "y.jpg.png", 8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  CHECK(open_error(options).empty());
  write_png(dir.path() / "val" / "a" / "x.png", 8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  CHECK(contains(open_error(options, Split::kTest), "class folders differ"));
}

#else

TEST_CASE("image folder: a build without OpenCV says so") {
  test::TempDir dir;
  CHECK(contains(open_error(folder_options(dir, 8)), "this build has no OpenCV"));
}

#endif
