// Readers of datasets that fit in memory as uint8: IDX (Fashion-MNIST, MNIST) and the
// CIFAR-10 binary batches. Files are read and validated once, when the dataset is opened.
#include "common/error.h"
#include "data/random.h"
#include "data/readers.h"

#include <fmt/format.h>

#include <cstring>
#include <filesystem>

namespace dtrain::data {

namespace fs = std::filesystem;

PixelTable make_pixel_table(const std::array<double, 3>& mean, const std::array<double, 3>& std) {
  PixelTable table{};
  for (size_t c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      table.lut[c][static_cast<size_t>(v)] = static_cast<float>((v / 255.0 - mean[c]) / std[c]);
    }
  }
  return table;
}

namespace {

// One random crop of an image zero-padded by PadCropFlip::pad pixels, flipped horizontally
// with probability 1/2 where flips are allowed (torchvision's RandomCrop(size, padding=pad) +
// RandomHorizontalFlip). Drawn from the sample's seed, so a sample's transform depends on
// the seed alone; the identity (no shift, no flip) when the sample is not augmented.
struct CropDraw {
  int64_t dy = 0;  // the crop's offset from the image, in [-pad, pad]
  int64_t dx = 0;
  bool flip = false;
};

CropDraw draw_crop(const PadCropFlip& augment, uint64_t seed) {
  if (augment.pad == 0 && !augment.flip) return {};
  Rng rng(seed);
  const auto span = static_cast<uint64_t>(2 * augment.pad + 1);
  CropDraw crop;
  crop.dy = static_cast<int64_t>(rng.below(span)) - augment.pad;
  crop.dx = static_cast<int64_t>(rng.below(span)) - augment.pad;
  crop.flip = augment.flip && rng.below(2) == 1;
  return crop;
}

// A rows x cols plane of uint8 pixels into `out` through `lut`, cropped and flipped as
// `crop` says; pixels from outside the image are 0 (black) before normalisation.
void write_plane(const uint8_t* plane, int64_t rows, int64_t cols, const CropDraw& crop,
                 const std::array<float, 256>& lut, float* out) {
  if (crop.dy == 0 && crop.dx == 0 && !crop.flip) {
    for (int64_t j = 0; j < rows * cols; ++j) out[j] = lut[plane[j]];
    return;
  }
  for (int64_t y = 0; y < rows; ++y) {
    const int64_t sy = y + crop.dy;
    for (int64_t x = 0; x < cols; ++x) {
      const int64_t sx = (crop.flip ? cols - 1 - x : x) + crop.dx;
      const bool inside = sy >= 0 && sy < rows && sx >= 0 && sx < cols;
      out[y * cols + x] = lut[inside ? plane[sy * cols + sx] : 0];
    }
  }
}

uint32_t read_be32(const std::vector<uint8_t>& bytes, size_t offset) {
  return (uint32_t{bytes[offset]} << 24) | (uint32_t{bytes[offset + 1]} << 16) |
         (uint32_t{bytes[offset + 2]} << 8) | uint32_t{bytes[offset + 3]};
}

const char* holds(const std::string& path) {
  return path.size() > 3 && path.compare(path.size() - 3, 3, ".gz") == 0 ? "holds (gunzipped)"
                                                                          : "holds";
}

// `dir/name`, or else `dir/name.gz`; UserError with `hint` when neither exists.
std::string find_idx_file(const std::string& dir, const std::string& name,
                          const std::string& hint) {
  const fs::path plain = fs::path(dir) / name;
  if (fs::is_regular_file(plain)) return plain.string();
  const fs::path gz = fs::path(dir) / (name + ".gz");
  if (fs::is_regular_file(gz)) return gz.string();
  throw UserError(fmt::format("{}: not found (nor {}); {}", gz.string(), name, hint));
}

constexpr uint32_t kIdxImageMagic = 2051;  // 0x00000803: unsigned byte, 3 dimensions
constexpr uint32_t kIdxLabelMagic = 2049;  // 0x00000801: unsigned byte, 1 dimension
constexpr int64_t kNumDigitClasses = 10;
constexpr int64_t kIdxPad = 2;

// IDX images [count, rows, cols] and labels [count], kept as the files' bytes.
class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path, double mean,
             double std, PadCropFlip augment)
      : images_(read_file(images_path)), labels_(read_file(labels_path)),
        table_(make_pixel_table({mean, mean, mean}, {std, std, std})), augment_(augment) {
    check_images(images_path);
    check_labels(labels_path, images_path);
  }

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return kNumDigitClasses; }
  SampleShape shape() const override { return {1, rows_, cols_}; }

  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    const uint8_t* pixels = images_.data() + 16 + index * rows_ * cols_;
    write_plane(pixels, rows_, cols_, draw_crop(augment_, seed), table_.lut[0], out);
    return labels_[static_cast<size_t>(8 + index)];
  }

 private:
  void check_images(const std::string& path) {
    if (images_.size() < 16) {
      throw UserError(fmt::format("{}: truncated: {} bytes, shorter than the 16-byte IDX "
                                  "image header",
                                  path, images_.size()));
    }
    const uint32_t magic = read_be32(images_, 0);
    if (magic != kIdxImageMagic) {
      throw UserError(fmt::format("{}: bad magic number {} (expected {}): not an IDX image "
                                  "file; check data.path and the file names",
                                  path, magic, kIdxImageMagic));
    }
    count_ = read_be32(images_, 4);
    rows_ = read_be32(images_, 8);
    cols_ = read_be32(images_, 12);
    if (count_ < 1 || rows_ < 1 || cols_ < 1 || rows_ > 4096 || cols_ > 4096) {
      throw UserError(fmt::format("{}: corrupt header: {} of {}x{}", path,
                                  count_of(count_, "image"), rows_, cols_));
    }
    const auto expected = static_cast<uint64_t>(16 + count_ * rows_ * cols_);
    if (images_.size() != expected) {
      throw UserError(fmt::format("{}: {}: header promises {} of {}x{} ({} bytes), file {} {} "
                                  "bytes",
                                  path, images_.size() < expected ? "truncated" : "corrupt",
                                  count_of(count_, "image"), rows_, cols_, expected, holds(path),
                                  images_.size()));
    }
  }

  void check_labels(const std::string& path, const std::string& images_path) const {
    if (labels_.size() < 8) {
      throw UserError(fmt::format("{}: truncated: {} bytes, shorter than the 8-byte IDX "
                                  "label header",
                                  path, labels_.size()));
    }
    const uint32_t magic = read_be32(labels_, 0);
    if (magic != kIdxLabelMagic) {
      throw UserError(fmt::format("{}: bad magic number {} (expected {}): not an IDX label "
                                  "file; check data.path and the file names",
                                  path, magic, kIdxLabelMagic));
    }
    const int64_t count = read_be32(labels_, 4);
    if (count != count_) {
      throw UserError(fmt::format("{}: {}, but {} holds {}; both files must come from the same "
                                  "release and split",
                                  path, count_of(count, "label"), images_path,
                                  count_of(count_, "image")));
    }
    const auto expected = static_cast<uint64_t>(8 + count);
    if (labels_.size() != expected) {
      throw UserError(fmt::format("{}: {}: header promises {} ({} bytes), file {} {} bytes",
                                  path, labels_.size() < expected ? "truncated" : "corrupt",
                                  count_of(count, "label"), expected, holds(path),
                                  labels_.size()));
    }
    for (int64_t i = 0; i < count; ++i) {
      const int64_t label = labels_[static_cast<size_t>(8 + i)];
      if (label >= kNumDigitClasses) {
        throw UserError(fmt::format("{}: corrupt: label {} of sample {} is not below {}", path,
                                    label, i, kNumDigitClasses));
      }
    }
  }

  std::vector<uint8_t> images_;  // 16-byte header, then [count, rows, cols]
  std::vector<uint8_t> labels_;  // 8-byte header, then [count]
  PixelTable table_;
  PadCropFlip augment_;
  int64_t count_ = 0;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
};

}  // namespace

std::unique_ptr<Dataset> open_idx_files(const std::string& images_path,
                                        const std::string& labels_path, double mean, double std,
                                        PadCropFlip augment) {
  return std::make_unique<IdxDataset>(images_path, labels_path, mean, std, augment);
}

std::unique_ptr<Dataset> open_idx(const DataOptions& options, Split split) {
  const std::string hint = dataset_hint(options.dataset);
  const std::string prefix = split == Split::kTrain ? "train" : "t10k";
  const std::string images = find_idx_file(options.path, prefix + "-images-idx3-ubyte", hint);
  const std::string labels = find_idx_file(options.path, prefix + "-labels-idx1-ubyte", hint);
  // Training augmentation: shifts of up to 2 pixels; clothes may be mirrored, digits not.
  const bool fashion = options.dataset == "fashion_mnist";
  PadCropFlip augment;
  if (split == Split::kTrain && options.augment) augment = {kIdxPad, fashion};
  // Mean and standard deviation of the training pixels, in [0, 1].
  return fashion ? open_idx_files(images, labels, 0.2860, 0.3530, augment)
                 : open_idx_files(images, labels, 0.1307, 0.3081, augment);
}

namespace {

constexpr int64_t kCifarSide = 32;
constexpr int64_t kCifarPixels = 3 * kCifarSide * kCifarSide;  // CHW: 1024 R, 1024 G, 1024 B
constexpr int64_t kCifarRecord = 1 + kCifarPixels;             // label byte, then pixels
constexpr int64_t kCifarClasses = 10;
constexpr int64_t kCifarBatchRecords = 10000;  // each of the 5 training batches and the test batch
constexpr int64_t kCifarPad = 4;

// CIFAR-10 in memory: labels [n] and pixels [n, 3, 32, 32], uint8.
class Cifar10Dataset : public Dataset {
 public:
  Cifar10Dataset(const std::vector<std::string>& files, bool augment)
      : augment_(augment ? PadCropFlip{kCifarPad, true} : PadCropFlip{}),
        table_(make_pixel_table({0.4914, 0.4822, 0.4465}, {0.2470, 0.2435, 0.2616})) {
    for (const std::string& file : files) append(file);
  }

  int64_t size() const override { return static_cast<int64_t>(labels_.size()); }
  int64_t num_classes() const override { return kCifarClasses; }
  SampleShape shape() const override { return {3, kCifarSide, kCifarSide}; }

  // Training: random 32x32 crop of the image zero-padded by 4 pixels, then a horizontal
  // flip with probability 1/2 (torchvision RandomCrop(32, padding=4) + RandomHorizontalFlip).
  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    const uint8_t* pixels = pixels_.data() + index * kCifarPixels;
    const CropDraw crop = draw_crop(augment_, seed);
    for (int64_t c = 0; c < 3; ++c) {
      write_plane(pixels + c * kCifarSide * kCifarSide, kCifarSide, kCifarSide, crop,
                  table_.lut[static_cast<size_t>(c)], out + c * kCifarSide * kCifarSide);
    }
    return labels_[static_cast<size_t>(index)];
  }

 private:
  void append(const std::string& path) {
    const std::vector<uint8_t> bytes = read_file(path);
    const auto size = static_cast<int64_t>(bytes.size());
    if (size == 0) {
      throw UserError(fmt::format("{}: empty (0 bytes); download the file again", path));
    }
    if (size % kCifarRecord != 0) {
      // Short of a whole batch, the file lost its end; longer, bytes were added to it.
      const bool short_of_batch = size < kCifarBatchRecords * kCifarRecord;
      throw UserError(fmt::format(
          "{}: {}{} bytes is not a whole number of {}-byte records (1 label + 3072 pixels): {} "
          "and {} over, {} than a CIFAR-10 batch ({} records, {} bytes); download the file "
          "again",
          path, short_of_batch ? "truncated: " : "", size, kCifarRecord,
          count_of(size / kCifarRecord, "record"), count_of(size % kCifarRecord, "byte"),
          short_of_batch ? "shorter" : "longer", kCifarBatchRecords,
          kCifarBatchRecords * kCifarRecord));
    }
    const int64_t count = size / kCifarRecord;
    const size_t first = labels_.size();
    labels_.resize(first + static_cast<size_t>(count));
    pixels_.resize(labels_.size() * static_cast<size_t>(kCifarPixels));
    for (int64_t r = 0; r < count; ++r) {
      const uint8_t* record = bytes.data() + r * kCifarRecord;
      if (record[0] >= kCifarClasses) {
        throw UserError(fmt::format("{}: corrupt: record {} has label {}, not below {} (is this "
                                    "the CIFAR-100 file?)",
                                    path, r, record[0], kCifarClasses));
      }
      labels_[first + static_cast<size_t>(r)] = record[0];
      std::memcpy(pixels_.data() + (static_cast<int64_t>(first) + r) * kCifarPixels, record + 1,
                  kCifarPixels);
    }
  }

  PadCropFlip augment_;
  PixelTable table_;
  std::vector<uint8_t> labels_;
  std::vector<uint8_t> pixels_;
};

}  // namespace

std::unique_ptr<Dataset> open_cifar10(const DataOptions& options, Split split) {
  std::vector<std::string> names;
  if (split == Split::kTrain) {
    for (int i = 1; i <= 5; ++i) names.push_back(fmt::format("data_batch_{}.bin", i));
  } else {
    names.push_back("test_batch.bin");
  }
  // The archive unpacks into cifar-10-batches-bin/; accept its parent as data.path too.
  fs::path dir = options.path;
  if (!fs::is_regular_file(dir / names[0]) &&
      fs::is_regular_file(dir / "cifar-10-batches-bin" / names[0])) {
    dir /= "cifar-10-batches-bin";
  }
  std::vector<std::string> files;
  for (const std::string& name : names) {
    const fs::path file = dir / name;
    if (!fs::is_regular_file(file)) {
      throw UserError(
          fmt::format("{}: not found; {}", file.string(), dataset_hint(options.dataset)));
    }
    files.push_back(file.string());
  }
  return open_cifar10_files(files, split == Split::kTrain && options.augment);
}

std::unique_ptr<Dataset> open_cifar10_files(const std::vector<std::string>& paths, bool augment) {
  return std::make_unique<Cifar10Dataset>(paths, augment);
}

}  // namespace dtrain::data
