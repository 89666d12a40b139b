// The image-folder dataset (torchvision ImageFolder layout): root/{train,val}/<class>/<file>,
// classes indexed by sorted folder name, JPEG/PNG decoded with OpenCV on every get().
#include "common/error.h"
#include "data/random.h"
#include "data/readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>

#ifdef DTRAIN_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

namespace dtrain::data {

#ifdef DTRAIN_OPENCV

namespace {

namespace fs = std::filesystem;

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// Sorted names of the sub-folders of `root`.
std::vector<std::string> class_names(const fs::path& root) {
  const std::string problem = folder_problem(root.string());
  if (!problem.empty()) {
    throw UserError(fmt::format("{}: {}; image_folder expects data.path/train and "
                                "data.path/val, one sub-folder per class",
                                root.string(), problem));
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    throw UserError(fmt::format("{}: no class sub-folders; put each class's images in a "
                                "folder of its own",
                                root.string()));
  }
  return names;
}

// Every image file, as one string of relative names (compact for a million files).
struct FileList {
  std::vector<std::string> class_dirs;
  std::string names;             // relative paths, concatenated
  std::vector<size_t> offsets;   // [n + 1]: file i is names[offsets[i], offsets[i + 1])
  std::vector<int32_t> labels;   // [n]
};

FileList list_files(const fs::path& root, const std::vector<std::string>& classes) {
  FileList files;
  files.offsets.push_back(0);
  for (size_t label = 0; label < classes.size(); ++label) {
    const fs::path dir = root / classes[label];
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             dir, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && is_image_file(entry.path())) {
        names.push_back(entry.path().lexically_relative(dir).string());
      }
    }
    if (names.empty()) {
      throw UserError(fmt::format("{}: no .jpg, .jpeg or .png files; add images or remove "
                                  "the class folder",
                                  dir.string()));
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      files.names += name;
      files.offsets.push_back(files.names.size());
      files.labels.push_back(static_cast<int32_t>(label));
    }
    files.class_dirs.push_back(dir.string());
  }
  return files;
}

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

// torchvision Resize(round(size / 0.875)) + CenterCrop(size); Python rounds half to even.
cv::Mat resize_center_crop(const cv::Mat& image, int size) {
  const auto shorter = static_cast<int>(std::nearbyint(size / 0.875));
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
  ImageFolderDataset(FileList files, int64_t image_size, bool train)
      : files_(std::move(files)), size_(static_cast<int>(image_size)), train_(train),
        table_(make_pixel_table({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225})) {}

  int64_t size() const override { return static_cast<int64_t>(files_.labels.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(files_.class_dirs.size()); }
  SampleShape shape() const override { return {3, size_, size_}; }

  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    const auto i = static_cast<size_t>(index);
    const int32_t label = files_.labels[i];
    const std::string path =
        files_.class_dirs[static_cast<size_t>(label)] + "/" +
        files_.names.substr(files_.offsets[i], files_.offsets[i + 1] - files_.offsets[i]);
    try {
      const cv::Mat image = cv::imread(path, cv::IMREAD_COLOR);  // 8-bit BGR
      if (image.empty()) {
        throw UserError(fmt::format("{}: cannot decode the image (corrupt, truncated, or not a "
                                    "JPEG/PNG); replace or remove the file",
                                    path));
      }
      Rng rng(seed);
      if (train_) {
        const cv::Mat crop = random_resized_crop(image, size_, rng);
        write_chw(crop, rng.below(2) == 1, out);
      } else {
        write_chw(resize_center_crop(image, size_), false, out);
      }
    } catch (const cv::Exception& e) {
      throw UserError(fmt::format("{}: OpenCV cannot process the image: {}", path, e.err));
    }
    return label;
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

  FileList files_;
  int size_;
  bool train_;
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
    const bool train = split == Split::kTrain && options.augment;
    return std::make_unique<ImageFolderDataset>(list_files(root, classes), options.image_size,
                                                train);
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
