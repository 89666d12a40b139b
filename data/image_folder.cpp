// The image-folder dataset (torchvision ImageFolder layout): root/{train,val}/<class>/<file>,
// classes indexed by sorted folder name, JPEG/PNG decoded with OpenCV on every get(). When
// files are checked, and what data.skip_bad_images does: data/image_list.h.
#include "common/error.h"
#include "common/log.h"
#include "data/image_file.h"
#include "data/image_list.h"
#include "data/random.h"
#include "data/readers.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>

#ifdef DTRAIN_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace dtrain::data {

#ifdef DTRAIN_OPENCV

namespace {

namespace fs = std::filesystem;

// Bilinear when enlarging; area averaging when shrinking, which (like PIL's antialiased
// resize that torchvision uses) does not alias.
cv::Mat resize_to(const cv::Mat& image, int width, int height) {
  cv::Mat resized;
  const int interpolation =
      width < image.cols && height < image.rows ? cv::INTER_AREA : cv::INTER_LINEAR;
  cv::resize(image, resized, cv::Size(width, height), 0, 0, interpolation);
  return resized;
}

// torchvision RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)): ten tries at a
// box of random area and log-uniform aspect ratio, else the centered box of clamped ratio.
cv::Mat random_resized_crop(const cv::Mat& image, int size, Rng& rng) {
  const int height = image.rows;
  const int width = image.cols;
  const double area = static_cast<double>(height) * width;
  const double min_ratio = 3.0 / 4.0;
  const double max_ratio = 4.0 / 3.0;
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(0.08, 1.0);
    const double ratio = std::exp(rng.uniform(std::log(min_ratio), std::log(max_ratio)));
    const auto w = static_cast<int>(std::lround(std::sqrt(target * ratio)));
    const auto h = static_cast<int>(std::lround(std::sqrt(target / ratio)));
    if (w > 0 && w <= width && h > 0 && h <= height) {
      const auto top = static_cast<int>(rng.below(static_cast<uint64_t>(height - h + 1)));
      const auto left = static_cast<int>(rng.below(static_cast<uint64_t>(width - w + 1)));
      return resize_to(image(cv::Rect(left, top, w, h)), size, size);
    }
  }
  int w = width;
  int h = height;
  const double in_ratio = static_cast<double>(width) / height;
  if (in_ratio < min_ratio) {
    h = static_cast<int>(std::lround(w / min_ratio));
  } else if (in_ratio > max_ratio) {
    w = static_cast<int>(std::lround(h * max_ratio));
  }
  return resize_to(image(cv::Rect((width - w) / 2, (height - h) / 2, w, h)), size, size);
}

// torchvision Resize(round(size / fraction)) + CenterCrop(size); Python rounds half to even.
// cv::resize copies an image already of the target size, so at fraction 1 an image of
// size x size is passed through unchanged.
cv::Mat resize_center_crop(const cv::Mat& image, int size, double fraction) {
  const auto shorter = static_cast<int>(std::nearbyint(size / fraction));
  int width = shorter;
  int height = shorter;
  if (image.cols <= image.rows) {
    height = static_cast<int>(static_cast<int64_t>(shorter) * image.rows / image.cols);
  } else {
    width = static_cast<int>(static_cast<int64_t>(shorter) * image.cols / image.rows);
  }
  const cv::Mat resized = resize_to(image, width, height);
  const auto top = static_cast<int>(std::nearbyint((height - size) / 2.0));
  const auto left = static_cast<int>(std::nearbyint((width - size) / 2.0));
  return resized(cv::Rect(left, top, size, size));
}

class ImageFolderDataset : public Dataset {
 public:
  // `skipped`: files left out by data.skip_bad_images (0 when it is off).
  ImageFolderDataset(FileList files, int64_t image_size, double center_crop_fraction,
                     bool train, bool skip_bad_images, int64_t skipped)
      : files_(std::move(files)), size_(static_cast<int>(image_size)),
        center_crop_fraction_(center_crop_fraction), train_(train),
        skip_bad_images_(skip_bad_images), skipped_(skipped),
        table_(make_pixel_table({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})) {}

  int64_t size() const override { return static_cast<int64_t>(files_.labels.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(files_.class_dirs.size()); }
  SampleShape shape() const override { return {3, size_, size_}; }

  int64_t num_skipped() const override { return skipped_; }

  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    const auto i = static_cast<size_t>(index);
    const std::string path = files_.path(i);
    std::vector<uint8_t> bytes;
    cv::Mat image;  // 8-bit BGR
    std::string problem = read_image_file(path, bytes);
    if (problem.empty()) problem = decode_image(bytes, image);
    if (!problem.empty()) throw UserError(load_error(path, problem));
    try {
      Rng rng(seed);
      if (train_) {
        const cv::Mat crop = random_resized_crop(image, size_, rng);
        write_chw(crop, rng.below(2) == 1, out);
      } else {
        write_chw(resize_center_crop(image, size_, center_crop_fraction_), false, out);
      }
    } catch (const cv::Exception& e) {
      throw UserError(fmt::format("{}: OpenCV cannot process the image: {}", path, e.err));
    }
    return files_.labels[i];
  }

 private:
  // `view` [size, size] 8-bit BGR -> out [3, size, size] normalised RGB, mirrored if `flip`.
  void write_chw(const cv::Mat& view, bool flip, float* out) const {
    DTRAIN_CHECK(view.type() == CV_8UC3 && view.rows == size_ && view.cols == size_,
                 "unexpected image {}x{} of type {}", view.cols, view.rows, view.type());
    const int64_t plane = int64_t{size_} * size_;
    const auto& red = table_.lut[0];
    const auto& green = table_.lut[1];
    const auto& blue = table_.lut[2];
    for (int y = 0; y < size_; ++y) {
      const uint8_t* row = view.ptr<uint8_t>(y);
      float* r = out + int64_t{y} * size_;
      float* g = r + plane;
      float* b = g + plane;
      for (int x = 0; x < size_; ++x) {
        const uint8_t* pixel = row + 3 * (flip ? size_ - 1 - x : x);
        b[x] = blue[pixel[0]];
        g[x] = green[pixel[1]];
        r[x] = red[pixel[2]];
      }
    }
  }

  // A file that fails at load time: what to do depends on whether the files were checked
  // when the dataset was opened (data/image_list.h).
  std::string load_error(const std::string& path, const std::string& problem) const {
    if (skip_bad_images_) {
      return fmt::format("{}: {}; it passed the check of data.skip_bad_images when the dataset "
                         "was opened, and leaving it out now would change the sample order: "
                         "replace or remove the file and restart",
                         path, problem);
    }
    return fmt::format("{}: {}; replace or remove the file, or set data.skip_bad_images = true "
                       "to leave out damaged files when the dataset is opened",
                       path, problem);
  }

  FileList files_;
  int size_;
  double center_crop_fraction_;
  bool train_;
  bool skip_bad_images_;
  int64_t skipped_;
  PixelTable table_;
};

}  // namespace

std::unique_ptr<Dataset> open_image_folder(const DataOptions& options, Split split) {
  const fs::path root = fs::path(options.path) / (split == Split::kTrain ? "train" : "val");
  try {
    const std::vector<std::string> classes = class_names(root);
    // Labels are folder indices: val/ must have the very classes of train/.
    const fs::path train_root = fs::path(options.path) / "train";
    if (split == Split::kTest && fs::is_directory(train_root)) {
      const std::vector<std::string> train_classes = class_names(train_root);
      if (train_classes != classes) {
        throw UserError(fmt::format("{}: class folders differ from {} ({} vs {} classes); "
                                    "labels are folder indices, so both need the same classes",
                                    root.string(), train_root.string(), classes.size(),
                                    train_classes.size()));
      }
    }
    // Loader workers are the parallelism: OpenCV's own threads would oversubscribe the cores.
    cv::setNumThreads(0);
    FileList files = list_files(root, classes);
    int64_t skipped = 0;
    if (options.skip_bad_images) {
      const Unreadable dropped = drop_unreadable(files);
      skipped = dropped.count;
      if (files.size() == 0) {
        throw UserError(fmt::format("{}: none of its {} images is readable (first: {})",
                                    root.string(), dropped.count, dropped.first));
      }
      if (dropped.count > 0) {
        log::info("{}: skipped {} unreadable images (first: {})", root.string(), dropped.count,
                  dropped.first);
      }
    }
    const bool train = split == Split::kTrain && options.augment;
    return std::make_unique<ImageFolderDataset>(std::move(files), options.image_size,
                                                options.center_crop_fraction, train,
                                                options.skip_bad_images, skipped);
  } catch (const fs::filesystem_error& e) {
    throw UserError(fmt::format("{}: {}", e.path1().string(), e.code().message()));
  }
}

#else

std::unique_ptr<Dataset> open_image_folder(const DataOptions& options, Split split) {
  throw UserError(fmt::format("data.dataset = \"image_folder\" ({}): this build has no OpenCV; "
                              "install the OpenCV core, imgproc and imgcodecs development files "
                              "and rebuild, or use another dataset",
                              options.path));
}

#endif

}  // namespace dtrain::data
