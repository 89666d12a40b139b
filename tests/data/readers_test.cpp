// IDX, CIFAR-10 and synthetic datasets, on fixture files this test writes itself.
#include "common/error.h"
#include "data/dataset.h"
#include "fixtures.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
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

DataOptions options_for(const std::string& dataset, const std::string& path) {
  DataOptions options;
  options.dataset = dataset;
  options.path = path;
  return options;
}

void write_mnist(const fs::path& dir, bool gz, uint32_t count = 5) {
  const auto write = gz ? test::write_gz : test::write_bytes;
  const std::string ext = gz ? ".gz" : "";
  write(dir / ("train-images-idx3-ubyte" + ext), test::idx_images(count, 4, 3));
  write(dir / ("train-labels-idx1-ubyte" + ext), test::idx_labels(count));
  write(dir / ("t10k-images-idx3-ubyte" + ext), test::idx_images(2, 4, 3));
  write(dir / ("t10k-labels-idx1-ubyte" + ext), test::idx_labels(2));
}

}  // namespace

TEST_CASE("IDX reader loads gzip and plain files and normalises with the MNIST statistics") {
  for (const bool gz : {false, true}) {
    test::TempDir dir;
    write_mnist(dir.path(), gz);
    DataOptions options = options_for("mnist", dir.str());
    options.augment = false;
    const auto train = open_dataset(options, Split::kTrain);
    const auto eval = open_dataset(options, Split::kTest);
    REQUIRE(train->size() == 5);
    REQUIRE(eval->size() == 2);
    CHECK(train->num_classes() == 10);
    CHECK_FALSE(train->on_device());
    const auto shape = train->shape();
    CHECK((shape.channels == 1 && shape.height == 4 && shape.width == 3));
    std::vector<float> out(12);
    for (int64_t i = 0; i < 5; ++i) {
      CHECK(train->get(i, out.data(), 123) == (i * 3) % 10);
      for (int64_t y = 0; y < 4; ++y) {
        for (int64_t x = 0; x < 3; ++x) {
          const double pixel = static_cast<double>((i * 31 + y * 7 + x) % 256) / 255.0;
          CHECK(out[static_cast<size_t>(y * 3 + x)] ==
                Approx((pixel - 0.1307) / 0.3081).epsilon(1e-6));
        }
      }
    }
  }
}

TEST_CASE("IDX augmentation: shifts of up to 2 pixels, mirrored for Fashion-MNIST only") {
  test::TempDir dir;
  write_mnist(dir.path(), /*gz=*/false);
  test::write_bytes(dir.path() / "train-images-idx3-ubyte", test::idx_images(5, 6, 5));
  test::write_bytes(dir.path() / "t10k-images-idx3-ubyte", test::idx_images(2, 6, 5));
  double mean = 0;
  double std = 1;
  // The fixture's pixel (y, x) of sample i, or black outside the image.
  const auto pixel = [](int64_t i, int64_t y, int64_t x) -> int64_t {
    if (y < 0 || y >= 6 || x < 0 || x >= 5) return 0;
    return (i * 31 + y * 7 + x) % 256;
  };
  const auto to_byte = [&](float value) { return std::lround((value * std + mean) * 255.0); };
  // Whether crop offset (dy, dx) and `flip` explain every pixel of sample i's output.
  const auto explains = [&](const std::vector<float>& out, int64_t i, int64_t dy, int64_t dx,
                            bool flip) {
    for (int64_t y = 0; y < 6; ++y) {
      for (int64_t x = 0; x < 5; ++x) {
        const int64_t sx = (flip ? 4 - x : x) + dx;
        if (to_byte(out[static_cast<size_t>(y * 5 + x)]) != pixel(i, y + dy, sx)) return false;
      }
    }
    return true;
  };

  for (const std::string dataset : {"fashion_mnist", "mnist"}) {
    CAPTURE(dataset);
    mean = dataset == "mnist" ? 0.1307 : 0.2860;  // the normalisation the reader applies
    std = dataset == "mnist" ? 0.3081 : 0.3530;
    const DataOptions options = options_for(dataset, dir.str());  // augment: the default
    const auto train = open_dataset(options, Split::kTrain);
    const auto eval = open_dataset(options, Split::kTest);
    std::vector<float> out(30);
    std::vector<float> again(30);
    int flips = 0;
    int shifts = 0;
    for (uint64_t seed = 0; seed < 60; ++seed) {
      const int64_t i = static_cast<int64_t>(seed % 5);
      CHECK(train->get(i, out.data(), seed) == (i * 3) % 10);
      train->get(i, again.data(), seed);
      REQUIRE(again == out);  // the seed alone decides the transform
      bool explained = false;
      for (int64_t dy = -2; dy <= 2 && !explained; ++dy) {
        for (int64_t dx = -2; dx <= 2 && !explained; ++dx) {
          for (const bool flip : {false, true}) {
            if (explained || !explains(out, i, dy, dx, flip)) continue;
            explained = true;
            flips += flip;
            shifts += dy != 0 || dx != 0;
          }
        }
      }
      REQUIRE(explained);
      // Evaluation samples are never transformed.
      eval->get(1, out.data(), seed);
      REQUIRE(explains(out, 1, 0, 0, false));
    }
    CHECK(shifts > 30);
    if (dataset == "fashion_mnist") {
      CHECK(flips > 10);
      CHECK(flips < 50);
    } else {
      CHECK(flips == 0);  // a mirrored digit is another glyph
    }
  }
}

TEST_CASE("IDX reader rejects missing, truncated, corrupt and mismatched files, naming them") {
  test::TempDir dir;
  const fs::path images = dir.path() / "train-images-idx3-ubyte";
  const fs::path labels = dir.path() / "train-labels-idx1-ubyte";
  const DataOptions options = options_for("fashion_mnist", dir.str());

  std::string error = open_error(options);
  CHECK(contains(error, (dir.path() / "train-images-idx3-ubyte.gz").string()));
  CHECK(contains(error, "not found"));
  CHECK(contains(error, "dataset-fashion-mnist"));

  test::write_bytes(labels, test::idx_labels(5));
  std::vector<uint8_t> bytes = test::idx_images(5, 28, 28);
  bytes.resize(bytes.size() - 100);
  test::write_bytes(images, bytes);
  error = open_error(options);
  CHECK(contains(error, images.string() + ": truncated: header promises 5 images of 28x28"));
  CHECK(contains(error, std::to_string(bytes.size()) + " bytes"));

  test::write_bytes(images, test::idx_images(5, 28, 28, /*magic=*/2049));
  error = open_error(options);
  CHECK(contains(error, images.string() + ": bad magic number 2049 (expected 2051"));

  test::write_bytes(images, test::idx_images(5, 28, 28));
  test::write_bytes(labels, test::idx_labels(4));
  error = open_error(options);
  CHECK(contains(error, labels.string() + ": 4 labels, but " + images.string() + " holds 5"));

  test::write_bytes(labels, test::idx_labels(5, /*magic=*/2051));
  error = open_error(options);
  CHECK(contains(error, labels.string() + ": bad magic number 2051 (expected 2049"));

  bytes = test::idx_labels(5);
  bytes[8 + 3] = 12;
  test::write_bytes(labels, bytes);
  error = open_error(options);
  CHECK(contains(error, labels.string() + ": corrupt: label 12 of sample 3"));

  bytes = test::idx_labels(5);
  bytes.pop_back();
  test::write_bytes(labels, bytes);
  error = open_error(options);
  CHECK(contains(error, labels.string() + ": truncated: header promises 5 labels"));

  // Counts of one in the singular.
  test::write_bytes(labels, test::idx_labels(1));
  error = open_error(options);
  CHECK(contains(error,
                 labels.string() + ": 1 label, but " + images.string() + " holds 5 images"));
  bytes = test::idx_images(1, 28, 28);
  bytes.pop_back();
  test::write_bytes(images, bytes);
  error = open_error(options);
  CHECK(contains(error, images.string() + ": truncated: header promises 1 image of 28x28 (800 "
                                          "bytes), file holds 799 bytes"));
  test::write_bytes(images, test::idx_images(1, 28, 28));
  bytes = test::idx_labels(1);
  bytes.push_back(0);
  test::write_bytes(labels, bytes);
  error = open_error(options);
  CHECK(contains(error, labels.string() + ": corrupt: header promises 1 label (9 bytes), file "
                                          "holds 10 bytes"));

  // A gzip file cut short: zlib reports the stream ends early.
  test::write_bytes(labels, test::idx_labels(5));
  fs::remove(images);
  const fs::path images_gz = dir.path() / "train-images-idx3-ubyte.gz";
  test::write_gz(images_gz, test::idx_images(50, 28, 28));
  bytes = test::read_bytes(images_gz);
  bytes.resize(bytes.size() / 2);
  test::write_bytes(images_gz, bytes);
  error = open_error(options);
  CHECK(contains(error, images_gz.string() + ": truncated"));
}

TEST_CASE("gzip IDX files: members may be concatenated; other bytes after them are an error") {
  test::TempDir dir;
  write_mnist(dir.path(), /*gz=*/false);
  const fs::path plain = dir.path() / "train-images-idx3-ubyte";
  const fs::path images = dir.path() / "train-images-idx3-ubyte.gz";
  fs::remove(plain);
  DataOptions options = options_for("mnist", dir.str());
  options.augment = false;
  const std::vector<uint8_t> content = test::idx_images(5, 4, 3);
  const std::vector<uint8_t> whole = test::gzip_bytes(content);
  const auto append = [](std::vector<uint8_t> bytes, const std::vector<uint8_t>& more) {
    bytes.insert(bytes.end(), more.begin(), more.end());
    return bytes;
  };

  // Two members (gzip -c a b, or cat a.gz b.gz) are one file's content, in order.
  const auto half = content.begin() + static_cast<ptrdiff_t>(content.size() / 2);
  test::write_bytes(images, append(test::gzip_bytes({content.begin(), half}),
                                   test::gzip_bytes({half, content.end()})));
  const auto train = open_dataset(options, Split::kTrain);
  REQUIRE(train->size() == 5);
  std::vector<float> out(12);
  CHECK(train->get(4, out.data(), 0) == 2);
  CHECK(out[11] == Approx(((4 * 31 + 3 * 7 + 2) / 255.0 - 0.1307) / 0.3081).epsilon(1e-6));

  // Anything else after the last member is damage, even a single byte.
  const std::string end = ": corrupt: the gzip data ends at byte " + std::to_string(whole.size());
  test::write_bytes(images, append(whole, {'j', 'u', 'n', 'k', '\n'}));
  CHECK(open_error(options) == images.string() + end + " of " +
                                   std::to_string(whole.size() + 5) +
                                   ", and the 5 bytes after it are not another gzip member; "
                                   "download the file again");
  test::write_bytes(images, append(whole, {0x1f}));
  CHECK(contains(open_error(options),
                 images.string() + end + " of " + std::to_string(whole.size() + 1) +
                     ", and the 1 byte after it is not another gzip member"));
  test::write_bytes(images, append(whole, {0}));
  CHECK(contains(open_error(options), images.string() + ": corrupt: "));
  // A second member cut short is truncated, like a first one.
  test::write_bytes(images, append(whole, {0x1f, 0x8b, 8}));
  CHECK(contains(open_error(options), images.string() + ": truncated: "));
  // Plain files are read as they are, whatever they hold.
  fs::remove(images);
  test::write_bytes(plain, append(content, {0x1f, 0x8b}));
  CHECK(contains(open_error(options), plain.string() + ": corrupt: header promises 5 images"));
}

TEST_CASE("the real Fashion-MNIST files load (skipped when not installed)") {
  const DataOptions options;  // the default path and dataset
  if (!fs::exists(fs::path(options.path) / "train-labels-idx1-ubyte.gz") &&
      !fs::exists(fs::path(options.path) / "train-labels-idx1-ubyte")) {
    WARN("Fashion-MNIST not installed at " << options.path << ": skipped");
    return;
  }
  const auto train = open_dataset(options, Split::kTrain);
  const auto eval = open_dataset(options, Split::kTest);
  REQUIRE(train->size() == 60000);
  REQUIRE(eval->size() == 10000);
  const auto shape = train->shape();
  CHECK((shape.channels == 1 && shape.height == 28 && shape.width == 28));
  std::vector<float> out(28 * 28);
  CHECK(train->get(0, out.data(), 0) == 9);  // ankle boot
  CHECK(eval->get(0, out.data(), 0) == 9);
  const float black = static_cast<float>(-0.2860 / 0.3530);
  CHECK(out[0] == Approx(black));
  CHECK(*std::max_element(out.begin(), out.end()) <= Approx((1.0 - 0.2860) / 0.3530));
}

namespace {

void write_cifar(const fs::path& dir, int per_file) {
  for (int i = 1; i <= 5; ++i) {
    test::write_bytes(dir / ("data_batch_" + std::to_string(i) + ".bin"),
                      test::cifar_records(per_file, i));
  }
  test::write_bytes(dir / "test_batch.bin", test::cifar_records(per_file, 7));
}

constexpr std::array<double, 3> kCifarMean = {0.4914, 0.4822, 0.4465};
constexpr std::array<double, 3> kCifarStd = {0.2470, 0.2435, 0.2616};

// Back from normalised floats to bytes (the pixel table is invertible).
std::vector<int> to_bytes(const std::vector<float>& out) {
  std::vector<int> bytes(out.size());
  for (size_t j = 0; j < out.size(); ++j) {
    const size_t c = j / 1024;
    bytes[j] = static_cast<int>(std::lround((out[j] * kCifarStd[c] + kCifarMean[c]) * 255.0));
  }
  return bytes;
}

}  // namespace

TEST_CASE("CIFAR-10 reader: records, subfolder, crop-and-flip augmentation") {
  test::TempDir dir;
  write_cifar(dir.path() / "cifar-10-batches-bin", 3);
  DataOptions options = options_for("cifar10", dir.str());  // the subfolder's parent
  options.augment = false;
  const auto train = open_dataset(options, Split::kTrain);
  const auto eval = open_dataset(options, Split::kTest);
  REQUIRE(train->size() == 15);
  REQUIRE(eval->size() == 3);
  CHECK(train->num_classes() == 10);
  std::vector<float> out(3 * 32 * 32);
  // Sample 4 is record 1 of data_batch_2: label (2 + 1) % 10.
  CHECK(train->get(4, out.data(), 0) == 3);
  std::vector<int> bytes = to_bytes(out);
  for (int c = 0; c < 3; ++c) {
    for (int y = 0; y < 32; ++y) {
      for (int x = 0; x < 32; ++x) {
        REQUIRE(bytes[static_cast<size_t>((c * 32 + y) * 32 + x)] ==
                (13 + c * 50 + y * 3 + x) % 256);
      }
    }
  }
  CHECK(eval->get(2, out.data(), 0) == 9);

  options.augment = true;
  const auto augmented = open_dataset(options, Split::kTrain);
  int flips = 0;
  int shifts = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    augmented->get(4, out.data(), seed);
    bytes = to_bytes(out);
    std::vector<float> again(out.size());
    augmented->get(4, again.data(), seed);
    REQUIRE(again == out);  // the seed alone decides the transform
    // Some crop offset (dy, dx) in [-4, 4] and flip must explain every output pixel.
    bool explained = false;
    for (int dy = -4; dy <= 4 && !explained; ++dy) {
      for (int dx = -4; dx <= 4 && !explained; ++dx) {
        for (int flip = 0; flip < 2 && !explained; ++flip) {
          bool match = true;
          for (size_t j = 0; j < bytes.size() && match; ++j) {
            const int c = static_cast<int>(j / 1024);
            const int y = static_cast<int>(j / 32 % 32);
            const int x = static_cast<int>(j % 32);
            const int sy = y + dy;
            const int sx = (flip ? 31 - x : x) + dx;
            const bool inside = sy >= 0 && sy < 32 && sx >= 0 && sx < 32;
            match = bytes[j] == (inside ? (13 + c * 50 + sy * 3 + sx) % 256 : 0);
          }
          if (match) {
            explained = true;
            flips += flip;
            shifts += dy != 0 || dx != 0;
          }
        }
      }
    }
    REQUIRE(explained);
  }
  CHECK(flips > 5);
  CHECK(flips < 35);
  CHECK(shifts > 20);
}

TEST_CASE("CIFAR-10 reader rejects missing, truncated and CIFAR-100 files, naming them") {
  test::TempDir dir;
  const DataOptions options = options_for("cifar10", dir.str());
  std::string error = open_error(options);
  CHECK(contains(error, (dir.path() / "data_batch_1.bin").string() + ": not found"));

  write_cifar(dir.path(), 2);
  const fs::path third = dir.path() / "data_batch_3.bin";
  std::vector<uint8_t> bytes = test::cifar_records(2);
  bytes.resize(bytes.size() - 10);
  test::write_bytes(third, bytes);
  error = open_error(options);
  CHECK(contains(error, third.string() + ": truncated: 6136 bytes is not a whole number of "
                                         "3073-byte records (1 label + 3072 pixels): 1 record "
                                         "and 3063 bytes over"));

  bytes = test::cifar_records(2);
  bytes[3073] = 57;  // record 1's label
  test::write_bytes(third, bytes);
  error = open_error(options);
  CHECK(contains(error, third.string() + ": corrupt: record 1 has label 57"));
  CHECK(open_error(options, Split::kTest).empty());
}

TEST_CASE("CIFAR-10 reader: a size not of whole records says by how much, truncated if short") {
  test::TempDir dir;
  const DataOptions options = options_for("cifar10", dir.str());
  write_cifar(dir.path(), 2);
  const fs::path second = dir.path() / "data_batch_2.bin";
  const std::string shape = " is not a whole number of 3073-byte records (1 label + 3072 pixels): ";
  const std::string batch = "a CIFAR-10 batch (10000 records, 30730000 bytes)";

  // 2 bytes over a whole batch: not truncated.
  std::vector<uint8_t> bytes(10000 * 3073 + 2, 0);
  test::write_bytes(second, bytes);
  std::string error = open_error(options);
  CHECK(error == second.string() + ": 30730002 bytes" + shape + "10000 records and 2 bytes " +
                     "over, longer than " + batch + "; download the file again");

  // Short of a whole batch: truncated.
  bytes = test::cifar_records(2);
  bytes.resize(bytes.size() + 2);
  test::write_bytes(second, bytes);
  error = open_error(options);
  CHECK(error == second.string() + ": truncated: 6148 bytes" + shape + "2 records and 2 bytes " +
                     "over, shorter than " + batch + "; download the file again");

  test::write_bytes(second, {});
  CHECK(open_error(options) == second.string() + ": empty (0 bytes); download the file again");
}

TEST_CASE("synthetic dataset: shape, determinism, on_device; unknown names are refused") {
  DataOptions options = options_for("synthetic", "");
  options.synthetic_samples = 10;
  options.synthetic_classes = 3;
  options.synthetic_channels = 2;
  options.synthetic_image_size = 8;
  const auto dataset = open_dataset(options, Split::kTrain);
  CHECK(dataset->on_device());
  CHECK(dataset->size() == 10);
  CHECK(dataset->num_classes() == 3);
  CHECK(dataset->shape().numel() == 128);
  std::vector<float> a(128);
  std::vector<float> b(128);
  const int64_t label = dataset->get(5, a.data(), 1);
  CHECK(dataset->get(5, b.data(), 2) == label);
  CHECK(a == b);
  CHECK((label >= 0 && label < 3));
  double sum = 0;
  for (float v : a) sum += v * v;
  CHECK(sum / 128 == Approx(1.0).margin(0.5));  // unit variance, roughly
  dataset->get(6, b.data(), 1);
  CHECK(a != b);

  const std::string error = open_error(options_for("imagenet", "/tmp"));
  CHECK(contains(error, "\"imagenet\" is not one of: fashion_mnist, mnist, cifar10"));
}

TEST_CASE("data.path that is missing or a file is said to be so for every dataset kind") {
  test::TempDir dir;
  const fs::path file = dir.path() / "train-images-idx3-ubyte";
  test::write_bytes(file, test::idx_images(1, 2, 2));
  const fs::path missing = dir.path() / "nowhere";
  for (const std::string dataset : {"fashion_mnist", "mnist", "cifar10", "image_folder"}) {
    INFO(dataset);
    for (const Split split : {Split::kTrain, Split::kTest}) {
      CHECK(contains(open_error(options_for(dataset, file.string()), split),
                     "data.path \"" + file.string() + "\": not a folder (it is a file); "));
      CHECK(contains(open_error(options_for(dataset, missing.string()), split),
                     "data.path \"" + missing.string() + "\": does not exist; "));
    }
  }
  CHECK(contains(open_error(options_for("cifar10", "")), "data.path \"\": does not exist; unpack"));
}

TEST_CASE("splits that disagree in image size are an error naming both shapes") {
  test::TempDir dir;
  write_mnist(dir.path(), false);  // 4x3 images in both splits
  const DataOptions options = options_for("mnist", dir.str());
  const dtrain::data::Splits splits = dtrain::data::open_splits(options);
  REQUIRE(splits.test != nullptr);
  CHECK(splits.train->size() == 5);
  CHECK(splits.test->size() == 2);

  test::write_bytes(dir.path() / "t10k-images-idx3-ubyte", test::idx_images(2, 5, 3));
  try {
    dtrain::data::open_splits(options);
    FAIL("splits of 4x3 and 5x3 images opened");
  } catch (const UserError& e) {
    CHECK(std::string(e.what()) ==
          "data.path \"" + dir.str() +
              "\" (mnist): the test split's images are 1x5x3 but the training split's are "
              "1x4x3 (channels x height x width); one model takes both, so both splits must "
              "come from the same release of the dataset");
  }

  DataOptions synthetic = options_for("synthetic", "");
  synthetic.synthetic_samples = 4;
  synthetic.synthetic_image_size = 8;
  CHECK(dtrain::data::open_splits(synthetic).test == nullptr);
}
