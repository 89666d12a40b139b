// The image-folder dataset on tiny PNGs written by the test (its own encoder, via zlib).
#include "common/error.h"
#include "common/log.h"
#include "data/dataset.h"
#include "fixtures.h"
#include "source_dir.h"

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

#ifdef DTRAIN_IMAGE_CODECS

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

TEST_CASE("image folder: center_crop_fraction 1 passes images of image_size through") {
  // 12x12 with a distinct value per pixel and channel: any resampling or shift would show.
  test::TempDir dir;
  std::vector<uint8_t> pixels;
  for (int y = 0; y < 12; ++y) {
    for (int x = 0; x < 12; ++x) {
      pixels.insert(pixels.end(), {static_cast<uint8_t>(y * 12 + x), static_cast<uint8_t>(x * 20),
                                   static_cast<uint8_t>(255 - y * 20)});
    }
  }
  for (const char* split : {"train", "val"}) {
    write_png(dir.path() / split / "a" / "x.png", 12, 12, pixels);
  }
  DataOptions options = folder_options(dir, 12);
  options.center_crop_fraction = 1.0;
  options.augment = false;  // training takes the evaluation transform
  for (const Split split : {Split::kTrain, Split::kTest}) {
    const auto dataset = open_dataset(options, split);
    std::vector<float> out(3 * 12 * 12);
    CHECK(dataset->get(0, out.data(), 7) == 0);
    for (int c = 0; c < 3; ++c) {
      const auto channel = static_cast<size_t>(c);
      for (size_t j = 0; j < 144; ++j) {
        // Float normalisation rounds differently from this double one; a level is 0.017.
        REQUIRE(out[channel * 144 + j] == Approx(imagenet(c, pixels[3 * j + channel])).margin(1e-5));
      }
    }
  }
  // The default 0.875 enlarges 12 to round(12 / 0.875) = 14 and crops: pixels change.
  options.center_crop_fraction = 0.875;
  std::vector<float> zoomed(3 * 12 * 12);
  open_dataset(options, Split::kTest)->get(0, zoomed.data(), 0);
  CHECK(zoomed[0] != imagenet(0, pixels[0]));
}

std::vector<uint8_t> gradient_jpeg() {
  return test::read_bytes(fs::path(DTRAIN_SOURCE_DIR) / "tests/data/files/gradient32.jpg");
}

// The UserError of loading sample `index`, or "" when it loaded.
std::string load_error(const dtrain::data::Dataset& dataset, int64_t index) {
  std::vector<float> out(static_cast<size_t>(dataset.shape().numel()));
  try {
    dataset.get(index, out.data(), 0);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST_CASE("image folder: a damaged file is an error naming it when it is loaded") {
  test::TempDir dir;
  const fs::path a = dir.path() / "train" / "a";
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  test::write_bytes(a / "0_ok.jpg", jpeg);
  std::vector<uint8_t> cut = jpeg;
  cut.resize(jpeg.size() - 40);  // libjpeg alone decodes this into a partly grey image
  test::write_bytes(a / "1_cut.jpg", cut);
  std::vector<uint8_t> png = test::png_rgb(8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  png.resize(png.size() - 30);
  test::write_bytes(a / "2_cut.png", png);
  test::write_bytes(a / "3_page.jpg", {'<', 'h', 't', 'm', 'l', '>'});
  test::write_bytes(a / "4_empty.jpeg", {0xff, 0xd8, 0xff, 0xd9});  // no image inside
  const auto dataset = open_dataset(folder_options(dir, 8), Split::kTrain);
  REQUIRE(dataset->size() == 5);
  CHECK(load_error(*dataset, 0).empty());
  const std::string hint = "; replace or remove the file, or set data.skip_bad_images = true";
  CHECK(load_error(*dataset, 1) ==
        (a / "1_cut.jpg").string() +
            ": truncated: no JPEG end-of-image marker (FF D9) in its last 365 bytes" + hint +
            " to leave out damaged files when the dataset is opened, and continue with --resume");
  CHECK(contains(load_error(*dataset, 2), (a / "2_cut.png").string() + ": truncated: no PNG"));
  CHECK(contains(load_error(*dataset, 3), (a / "3_page.jpg").string() + ": not a JPEG or PNG"));
  CHECK(contains(load_error(*dataset, 4), (a / "4_empty.jpeg").string() + ": corrupt: "));
  for (int64_t i = 1; i < 5; ++i) CHECK(contains(load_error(*dataset, i), hint));
}

TEST_CASE("image folder: skip_bad_images leaves damaged files out when it opens") {
  test::TempDir dir;
  const fs::path train = dir.path() / "train";
  const std::vector<uint8_t> jpeg = gradient_jpeg();
  std::vector<uint8_t> cut = jpeg;
  cut.resize(300);
  write_png(train / "a" / "1.png", 8, 8, test::solid_rgb(8, 8, 255, 0, 0));
  test::write_bytes(train / "a" / "2.jpg", cut);
  test::write_bytes(train / "a" / "3.jpg", jpeg);
  test::write_bytes(train / "b" / "1.png", {});
  write_png(train / "b" / "2.png", 8, 8, test::solid_rgb(8, 8, 0, 0, 255));
  DataOptions options = folder_options(dir, 8);
  options.augment = false;
  options.skip_bad_images = true;
  const fs::path log_path = fs::temp_directory_path() / "dtrain_data_test_skip.log";
  fs::remove(log_path);
  dtrain::log::open_file(log_path.string());  // the log is global: the rest of the run keeps it

  const auto dataset = open_dataset(options, Split::kTrain);
  CHECK(dataset->num_skipped() == 2);
  REQUIRE(dataset->size() == 3);  // a/1.png, a/3.jpg, b/2.png, in that order
  std::vector<float> out(3 * 8 * 8);
  CHECK(dataset->get(0, out.data(), 0) == 0);
  CHECK(is_solid(out, 8, {255, 0, 0}));
  CHECK(dataset->get(1, out.data(), 0) == 0);
  CHECK(dataset->get(2, out.data(), 0) == 1);
  CHECK(is_solid(out, 8, {0, 0, 255}));
  const std::string log = test::read_text(log_path);
  CHECK(contains(log, train.string() + ": skipped 2 unreadable images (first: " +
                          (train / "a" / "2.jpg").string() + ": truncated: no JPEG"));

  // A file that passes the open-time check but does not decode cannot be left out any more.
  test::write_bytes(train / "a" / "4.jpg", {0xff, 0xd8, 0xff, 0xd9});
  const auto later = open_dataset(options, Split::kTrain);
  REQUIRE(later->size() == 4);
  const std::string error = load_error(*later, 2);
  CHECK(contains(error, (train / "a" / "4.jpg").string() + ": corrupt"));
  CHECK(contains(error, "it passed the check of data.skip_bad_images when the dataset was "
                        "opened, and leaving it out now would change the sample order"));

  // Nothing readable at all is an error, not an empty dataset.
  test::TempDir bad;
  test::write_bytes(bad.path() / "train" / "a" / "x.png", {'x'});
  options.path = bad.str();
  const fs::path x = bad.path() / "train" / "a" / "x.png";
  CHECK(contains(open_error(options),
                 (bad.path() / "train").string() + ": its one image is unreadable (" +
                     x.string() + ": not a JPEG or PNG"));
  test::write_bytes(bad.path() / "train" / "a" / "y.png", {'y'});
  CHECK(contains(open_error(options), "train: none of its 2 images is readable (first: " +
                                          x.string() + ": not a JPEG or PNG"));
  options.skip_bad_images = false;
  CHECK(open_error(options).empty());

  // One file left out is said in the singular, and is not the "first" of several.
  fs::remove(bad.path() / "train" / "a" / "y.png");
  write_png(bad.path() / "train" / "a" / "z.png", 8, 8, test::solid_rgb(8, 8, 1, 2, 3));
  options.skip_bad_images = true;
  CHECK(open_dataset(options, Split::kTrain)->num_skipped() == 1);
  CHECK(contains(test::read_text(log_path), (bad.path() / "train").string() +
                                                ": skipped 1 unreadable image (" + x.string() +
                                                ": not a JPEG or PNG"));
  fs::remove(log_path);
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
  const std::string val = (dir.path() / "val").string();
  const std::string train = (dir.path() / "train").string();
  const std::string why = "; labels are folder indices, so both need the same classes";
  CHECK(open_error(options, Split::kTest) ==
        val + ": class folders differ from " + train + "'s: only in train: b" + why);

  // As many classes on each side, some differing: each side's names.
  fs::create_directories(dir.path() / "val" / "c");
  CHECK(open_error(options, Split::kTest) ==
        val + ": class folders differ from " + train + "'s: only in train: b; only in val: c" +
            why);

  // Many: the first few, then how many more.
  for (const char* name : {"d", "e", "f", "g", "h", "i"}) {
    fs::create_directories(dir.path() / "train" / name);
  }
  fs::create_directories(dir.path() / "val" / "b");
  CHECK(open_error(options, Split::kTest) ==
        val + ": class folders differ from " + train +
            "'s: only in train: d, e, f, g and 2 more; only in val: c" + why);
}

#else

TEST_CASE("image folder: a build without a JPEG/PNG decoder says so") {
  test::TempDir dir;
  CHECK(contains(open_error(folder_options(dir, 8)), "this build has no JPEG/PNG decoder"));
}

#endif
