// Internal to data/: the readers behind open_dataset() and the helpers they share
// (whole-file reading, per-channel normalisation tables).
#pragma once

#include "data/dataset.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::data {

// Training augmentation of the in-memory readers: a random crop of the image zero-padded by
// `pad` pixels, flipped horizontally with probability 1/2 when `flip`. {} leaves samples as
// they are.
struct PadCropFlip {
  int64_t pad = 0;
  bool flip = false;
};

// IDX files (options.dataset "fashion_mnist" or "mnist").
std::unique_ptr<Dataset> open_idx(const DataOptions& options, Split split);
// The IDX pair at these paths, gzip or plain; pixels normalised as (v / 255 - mean) / std.
// Validates both files completely (the fuzz target's entry point).
std::unique_ptr<Dataset> open_idx_files(const std::string& images_path,
                                        const std::string& labels_path, double mean, double std,
                                        PadCropFlip augment = {});
// CIFAR-10 binary batches.
std::unique_ptr<Dataset> open_cifar10(const DataOptions& options, Split split);
// The CIFAR-10 batch files at these paths, concatenated in order, gzip or plain.
std::unique_ptr<Dataset> open_cifar10_files(const std::vector<std::string>& paths, bool augment);
// One sub-folder per class of JPEG/PNG files; throws UserError in builds without OpenCV.
std::unique_ptr<Dataset> open_image_folder(const DataOptions& options, Split split);
// Random normal images, generated on the device by the loader.
std::unique_ptr<Dataset> open_synthetic(const DataOptions& options);

// What to do to get dataset `name`'s files, for error messages ("install Debian package ...").
std::string dataset_hint(const std::string& name);

// `count` and `noun` for messages, plural unless count is 1: "1 record", "2 records".
std::string count_of(int64_t count, const std::string& noun);

// Why `path` cannot be a dataset folder ("does not exist", "not a folder (it is a file)"),
// or "" when it is a folder.
std::string folder_problem(const std::string& path);

// The whole content of `path`: gunzipped when it starts with the gzip signature (its
// members' contents in order), else the bytes as they are. Throws UserError naming the file
// when it cannot be opened or read, or its gzip data is corrupt, cut short, or followed by
// bytes that are not another gzip member.
std::vector<uint8_t> read_file(const std::string& path);

// uint8 pixel -> normalised float, per channel: lut[c][v] = (v / 255 - mean[c]) / std[c].
struct PixelTable {
  std::array<std::array<float, 256>, 3> lut;
};
PixelTable make_pixel_table(const std::array<double, 3>& mean, const std::array<double, 3>& std);

}  // namespace dtrain::data
