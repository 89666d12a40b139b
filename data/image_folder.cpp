// The image-folder dataset (torchvision ImageFolder layout): root/{train,val}/<class>/<file>,
// classes indexed by sorted folder name. Every sample plans its crop from the image's size and
// its seed (data/crop_plan.h), decodes only that region (data/image_decode.h) and resamples it
// (data/resample.h): on the loader thread in get(), or on the device after stage(). When
// files are checked, and what data.skip_bad_images does: data/image_list.h.
#include "common/error.h"
#include "common/log.h"
#include "data/crop_plan.h"
#include "data/image_decode.h"
#include "data/image_file.h"
#include "data/image_list.h"
#include "data/random.h"
#include "data/readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iterator>

namespace dtrain::data {

#ifdef DTRAIN_IMAGE_CODECS

namespace {

namespace fs = std::filesystem;

// The first few of `names`, then how many more: "a, b, c, d and 6 more".
std::string some_of(const std::vector<std::string>& names) {
  constexpr size_t kShown = 4;
  std::string text;
  for (size_t i = 0; i < std::min(names.size(), kShown); ++i) {
    text += (i > 0 ? ", " : "") + names[i];
  }
  if (names.size() > kShown) text += fmt::format(" and {} more", names.size() - kShown);
  return text;
}

// How two sorted lists of class names differ: "only in train: b, c; only in val: d".
std::string class_difference(const std::vector<std::string>& train,
                             const std::vector<std::string>& val) {
  std::vector<std::string> train_only;
  std::vector<std::string> val_only;
  std::set_difference(train.begin(), train.end(), val.begin(), val.end(),
                      std::back_inserter(train_only));
  std::set_difference(val.begin(), val.end(), train.begin(), train.end(),
                      std::back_inserter(val_only));
  std::string text;
  if (!train_only.empty()) text = "only in train: " + some_of(train_only);
  if (!val_only.empty()) text += (text.empty() ? "" : "; ") + ("only in val: " + some_of(val_only));
  return text;
}

class ImageFolderDataset : public Dataset {
 public:
  // `skipped`: files left out by data.skip_bad_images (0 when it is off).
  ImageFolderDataset(FileList files, int64_t image_size, double center_crop_fraction,
                     bool train, bool skip_bad_images, int64_t skipped)
      : files_(std::move(files)), size_(static_cast<int>(image_size)),
        center_crop_fraction_(center_crop_fraction), train_(train),
        skip_bad_images_(skip_bad_images), skipped_(skipped),
        normalisation_(imagenet_normalisation()) {}

  int64_t size() const override { return static_cast<int64_t>(files_.labels.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(files_.class_dirs.size()); }
  SampleShape shape() const override { return {3, size_, size_}; }
  int64_t num_skipped() const override { return skipped_; }
  bool stages_samples() const override { return true; }

  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    StagedSample sample;
    stage(index, seed, sample);
    resample_on_host(sample.pixels.data(), sample.geometry, size_, normalisation_, out);
    return sample.geometry.label;
  }

  void stage(int64_t index, uint64_t seed, StagedSample& out) const override {
    const auto i = static_cast<size_t>(index);
    const std::string path = files_.path(i);
    std::vector<uint8_t> bytes;
    std::string problem = read_image_file(path, bytes);
    CropPlan plan;
    DecodedRegion region;
    if (problem.empty()) {
      problem = decode_region(
          bytes,
          [&](int height, int width) {
            Rng rng(seed);
            plan = train_ ? plan_random_resized_crop(height, width, size_, rng)
                          : plan_center_crop(height, width, size_, center_crop_fraction_);
            return plan.region;
          },
          region);
    }
    if (!problem.empty()) throw UserError(load_error(path, problem));
    out.pixels = std::move(region.rgb);
    out.geometry = plan.geometry;
    out.geometry.label = files_.labels[i];
  }

 private:
  // A file that fails at load time: what to do depends on whether the files were checked
  // when the dataset was opened (data/image_list.h).
  std::string load_error(const std::string& path, const std::string& problem) const {
    if (skip_bad_images_) {
      return fmt::format("{}: {}; it passed the check of data.skip_bad_images when the dataset "
                         "was opened, and leaving it out now would change the sample order: "
                         "replace or remove the file and continue with --resume",
                         path, problem);
    }
    return fmt::format("{}: {}; replace or remove the file, or set data.skip_bad_images = true "
                       "to leave out damaged files when the dataset is opened, and continue "
                       "with --resume",
                       path, problem);
  }

  FileList files_;
  int size_;
  double center_crop_fraction_;
  bool train_;
  bool skip_bad_images_;
  int64_t skipped_;
  PixelNormalisation normalisation_;
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
        throw UserError(fmt::format("{}: class folders differ from {}'s: {}; labels are folder "
                                    "indices, so both need the same classes",
                                    root.string(), train_root.string(),
                                    class_difference(train_classes, classes)));
      }
    }
    FileList files = list_files(root, classes);
    int64_t skipped = 0;
    if (options.skip_bad_images) {
      const Unreadable dropped = drop_unreadable(files);
      skipped = dropped.count;
      // The first file left out, by itself or as the first of several.
      const std::string which = (dropped.count == 1 ? "(" : "(first: ") + dropped.first + ")";
      if (files.size() == 0) {
        throw UserError(dropped.count == 1
                            ? fmt::format("{}: its one image is unreadable {}", root.string(),
                                          which)
                            : fmt::format("{}: none of its {} images is readable {}",
                                          root.string(), dropped.count, which));
      }
      if (dropped.count > 0) {
        log::info("{}: skipped {} {}", root.string(),
                  count_of(dropped.count, "unreadable image"), which);
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
  throw UserError(fmt::format("data.dataset = \"image_folder\" ({}): this build has no JPEG/PNG "
                              "decoder; install libjpeg-turbo's and libpng's development files "
                              "(Debian: libjpeg62-turbo-dev libpng-dev) and rebuild, or use "
                              "another dataset",
                              options.path));
}

#endif

}  // namespace dtrain::data
