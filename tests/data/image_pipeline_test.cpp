// The image-folder pipeline (crop plan, region decode, resample) against a reference written
// with OpenCV the straightforward way: decode the whole file, crop, cv::resize, normalise.
// The two may differ by resampling rounding only: OpenCV rounds to 8 bits and its bilinear
// weights to 11 bits, ours stays in float. Tolerance: one level of 255, in any pixel.
// On a GPU, the loader's device finishing against the host's, batch for batch.
#include "data/crop_plan.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/random.h"
#include "data/resample.h"
#include "data/resample_device.h"
#include "data/sampler.h"
#include "fixtures.h"

#include <catch2/catch.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#ifdef DTRAIN_OPENCV
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#endif

using dtrain::data::CropPlan;
using dtrain::data::DataOptions;
using dtrain::data::PixelNormalisation;
using dtrain::data::ResampleGeometry;
using dtrain::data::Rng;
using dtrain::data::Split;
namespace test = dtrain::data::test;
namespace fs = std::filesystem;

namespace {

// One level of 255 in the normalised units of channel c (the smallest std is 0.224).
constexpr float kOneLevel = 1.0f / (255.0f * 0.224f);

// A smooth, not trivially compressible test picture: gradients, a grating and some noise.
std::vector<uint8_t> picture(int width, int height, uint64_t seed) {
  Rng rng(seed);
  std::vector<uint8_t> rgb;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const double wave = 60 * std::sin(0.3 * x + 0.2 * y);
      rgb.push_back(static_cast<uint8_t>(std::clamp(255.0 * x / width + rng.uniform(-20, 20), 0.0, 255.0)));
      rgb.push_back(static_cast<uint8_t>(std::clamp(128 + wave, 0.0, 255.0)));
      rgb.push_back(static_cast<uint8_t>(std::clamp(255.0 * y / height, 0.0, 255.0)));
    }
  }
  return rgb;
}

}  // namespace

TEST_CASE("crop plans: torchvision's random-resized-crop box and flip, and the centre crop",
          "[image_pipeline]") {
  for (uint64_t seed = 0; seed < 200; ++seed) {
    Rng rng(seed);
    const CropPlan plan = dtrain::data::plan_random_resized_crop(375, 500, 224, rng);
    const auto& r = plan.region;
    REQUIRE((r.top >= 0 && r.left >= 0 && r.top + r.height <= 375 && r.left + r.width <= 500));
    const double area = static_cast<double>(r.height) * r.width / (375.0 * 500.0);
    CHECK(area >= 0.08 - 0.01);
    const double ratio = static_cast<double>(r.width) / r.height;
    CHECK((ratio > 0.74 && ratio < 1.35));
    CHECK((plan.geometry.height == r.height && plan.geometry.width == r.width));
    CHECK((plan.geometry.resized_height == 224 && plan.geometry.resized_width == 224));
  }
  // A thin strip: no try fits, so the centred box of clamped ratio 4/3.
  Rng rng(0);
  const CropPlan strip = dtrain::data::plan_random_resized_crop(10, 400, 8, rng);
  CHECK((strip.region.height == 10 && strip.region.width == 13 && strip.region.left == 193));
  // Eval: shorter side 375 -> round(224 / 0.875) = 256, the longer 500 -> 341; window centred.
  const CropPlan eval = dtrain::data::plan_center_crop(375, 500, 224, 0.875);
  CHECK((eval.geometry.resized_height == 256 && eval.geometry.resized_width == 341));
  CHECK((eval.geometry.top == 16 && eval.geometry.left == 58 && eval.geometry.flip == 0));
}

#ifdef DTRAIN_OPENCV

namespace {

// The sample the OpenCV reference makes of `rgb` (width x height) for `plan`: crop the region,
// cv::resize (INTER_AREA when both sides shrink, else INTER_LINEAR), take the window, mirror.
// Unnormalised: [3, size, size] bytes as float.
std::vector<float> opencv_sample(const cv::Mat& rgb, const ResampleGeometry& g,
                                 const dtrain::data::ImageRegion& region, int size) {
  const cv::Mat crop = rgb(cv::Rect(region.left, region.top, region.width, region.height));
  const bool area = g.resized_width < g.width && g.resized_height < g.height;
  cv::Mat resized;
  cv::resize(crop, resized, cv::Size(g.resized_width, g.resized_height), 0, 0,
             area ? cv::INTER_AREA : cv::INTER_LINEAR);
  const cv::Mat window = resized(cv::Rect(g.left, g.top, size, size));
  std::vector<float> out(static_cast<size_t>(3 * size * size));
  for (int y = 0; y < size; ++y) {
    for (int x = 0; x < size; ++x) {
      const auto* pixel = window.ptr<uint8_t>(y) + 3 * (g.flip ? size - 1 - x : x);
      for (int c = 0; c < 3; ++c) out[static_cast<size_t>((c * size + y) * size + x)] = pixel[c];
    }
  }
  return out;
}

PixelNormalisation bytes_unchanged() {
  PixelNormalisation identity{};
  for (int c = 0; c < 3; ++c) identity.scale[c] = 1.f;
  return identity;
}

float worst_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

}  // namespace

TEST_CASE("resample: within one level of OpenCV's area and bilinear resize", "[image_pipeline]") {
  struct Case {
    int width, height, resized_width, resized_height, size;
  };
  const Case cases[] = {
      {500, 375, 224, 224, 224},  // area, non-integer scale
      {64, 48, 32, 24, 24},       // area, scale 2 exactly
      {37, 23, 16, 16, 16},       // area, odd sizes
      {20, 50, 30, 30, 30},       // wider, shorter: bilinear
      {30, 30, 100, 100, 100},    // enlarge: bilinear
      {28, 28, 28, 28, 28},       // identity
      {300, 200, 96, 64, 64},     // area, then a window off the centre
  };
  const PixelNormalisation identity = bytes_unchanged();
  for (const Case& c : cases) {
    CAPTURE(c.width, c.height, c.resized_width, c.resized_height);
    std::vector<uint8_t> pixels = picture(c.width, c.height, 7);
    const cv::Mat rgb(c.height, c.width, CV_8UC3, pixels.data());
    for (int flip = 0; flip < 2; ++flip) {
      ResampleGeometry g;
      g.height = c.height;
      g.width = c.width;
      g.resized_height = c.resized_height;
      g.resized_width = c.resized_width;
      g.top = (c.resized_height - c.size) / 3;
      g.left = (c.resized_width - c.size) / 2;
      g.flip = flip;
      std::vector<float> ours(static_cast<size_t>(3 * c.size * c.size));
      dtrain::data::resample_on_host(pixels.data(), g, c.size, identity, ours.data());
      const float worst =
          worst_difference(ours, opencv_sample(rgb, g, {0, 0, c.height, c.width}, c.size));
      CAPTURE(flip, worst);
      CHECK(worst <= 1.0f + 1e-3f);
      if (c.width == c.resized_width && c.height == c.resized_height) CHECK(worst == 0.0f);
    }
  }
}

TEST_CASE("image folder: samples equal the OpenCV reference for the same seed and index",
          "[image_pipeline]") {
  test::TempDir dir;
  // JPEGs of a few shapes (written by OpenCV: quality 90, 4:2:0) and a PNG.
  struct File {
    std::string name;
    int width, height;
  };
  const File files[] = {{"a/wide.jpg", 250, 187}, {"a/tall.jpg", 120, 161},
                        {"b/small.png", 40, 30},  {"b/square.jpg", 64, 64}};
  std::vector<cv::Mat> decoded;
  for (const File& file : files) {
    std::vector<uint8_t> pixels = picture(file.width, file.height, file.width);
    cv::Mat rgb(file.height, file.width, CV_8UC3, pixels.data());
    cv::Mat bgr;
    cv::cvtColor(rgb, bgr, cv::COLOR_RGB2BGR);
    std::vector<uint8_t> bytes;
    REQUIRE(cv::imencode(fs::path(file.name).extension().string(), bgr, bytes,
                         {cv::IMWRITE_JPEG_QUALITY, 90}));
    for (const char* split : {"train", "val"}) test::write_bytes(dir.path() / split / file.name, bytes);
    cv::Mat again = cv::imdecode(bytes, cv::IMREAD_COLOR);
    cv::cvtColor(again, again, cv::COLOR_BGR2RGB);
    decoded.push_back(again);
  }
  // Sorted: a/tall, a/wide, b/small, b/square.
  const int order[] = {1, 0, 2, 3};
  DataOptions options;
  options.dataset = "image_folder";
  options.path = dir.str();
  options.image_size = 48;
  const dtrain::data::PixelNormalisation norm = dtrain::data::imagenet_normalisation();
  for (const Split split : {Split::kTrain, Split::kTest}) {
    const auto dataset = dtrain::data::open_dataset(options, split);
    REQUIRE(dataset->size() == 4);
    std::vector<float> ours(3 * 48 * 48);
    for (int64_t index = 0; index < 4; ++index) {
      const cv::Mat& rgb = decoded[static_cast<size_t>(order[index])];
      for (uint64_t seed = 0; seed < 25; ++seed) {
        CAPTURE(split == Split::kTrain, index, seed);
        CHECK(dataset->get(index, ours.data(), seed) == index / 2);
        Rng rng(seed);
        const CropPlan plan =
            split == Split::kTrain
                ? dtrain::data::plan_random_resized_crop(rgb.rows, rgb.cols, 48, rng)
                : dtrain::data::plan_center_crop(rgb.rows, rgb.cols, 48, 0.875);
        std::vector<float> reference = opencv_sample(rgb, plan.geometry, plan.region, 48);
        for (size_t i = 0; i < reference.size(); ++i) {
          const int c = static_cast<int>(i / (48 * 48));
          reference[i] = reference[i] * norm.scale[c] + norm.bias[c];
        }
        const float worst = worst_difference(ours, reference);
        CAPTURE(worst);
        REQUIRE(worst <= kOneLevel * 1.001f);
        if (split == Split::kTest) break;  // evaluation takes no seed
      }
    }
  }
}

#endif  // DTRAIN_OPENCV

namespace {

// A folder of PNGs of assorted sizes (train/ and val/ alike), 2 classes.
void write_folder(const fs::path& root, size_t count) {
  const std::vector<std::pair<int, int>> sizes = {{500, 375}, {375, 500}, {64, 64}, {40, 30},
                                                  {333, 500}, {800, 600}, {28, 28}};
  for (size_t i = 0; i < count; ++i) {
    const auto [width, height] = sizes[i % sizes.size()];
    for (const char* split : {"train", "val"}) {
      test::write_bytes(root / split / (i % 2 ? "odd" : "even") / (std::to_string(i) + ".png"),
                        test::png_rgb(width, height, picture(width, height, i)));
    }
  }
}

DataOptions folder_options(const test::TempDir& dir) {
  DataOptions options;
  options.dataset = "image_folder";
  options.path = dir.str();
  options.image_size = 32;
  return options;
}

dtrain::data::SamplerOptions sampler_options(const dtrain::data::Dataset& dataset, bool shuffle) {
  dtrain::data::SamplerOptions sampling;
  sampling.dataset_size = dataset.size();
  sampling.batch_size = 5;
  sampling.shuffle = shuffle;
  sampling.drop_last = false;
  return sampling;
}

}  // namespace

TEST_CASE("loader: image-folder batches are the same for 0, 1 and 3 loader threads",
          "[image_pipeline]") {
  test::TempDir dir;
  write_folder(dir.path(), 9);
  std::shared_ptr<const dtrain::data::Dataset> dataset =
      dtrain::data::open_dataset(folder_options(dir), Split::kTrain);
  std::vector<torch::Tensor> first;
  for (const int64_t workers : {0, 1, 3}) {
    dtrain::data::LoaderOptions loading;
    loading.num_workers = workers;
    loading.seed = 11;
    dtrain::data::Loader loader(dataset, dtrain::data::ShardedSampler(sampler_options(*dataset, true)),
                                loading, torch::kCPU);
    loader.start_epoch(1);
    dtrain::data::Batch batch;
    for (size_t b = 0; loader.next(batch); ++b) {
      if (workers == 0) {
        first.push_back(batch.images.clone());
      } else {
        REQUIRE(torch::equal(batch.images, first.at(b)));
      }
    }
  }
  CHECK(first.size() == 2);
}

TEST_CASE("loader: batches finished on a GPU equal those finished by the loader threads "
          "(skipped on CPU)",
          "[image_pipeline]") {
  if (!torch::cuda::is_available() || !dtrain::data::can_resample_on_device()) {
    WARN("no CUDA device or no resampling kernel in this build: skipped");
    return;
  }
  test::TempDir dir;
  write_folder(dir.path(), 14);
  const torch::Device cuda(torch::kCUDA, 0);
  for (const Split split : {Split::kTrain, Split::kTest}) {
    std::shared_ptr<const dtrain::data::Dataset> dataset =
        dtrain::data::open_dataset(folder_options(dir), split);
    const dtrain::data::SamplerOptions sampling = sampler_options(*dataset, split == Split::kTrain);
    dtrain::data::LoaderOptions host_finished;
    host_finished.num_workers = 3;
    dtrain::data::LoaderOptions device_finished = host_finished;
    device_finished.finish_on_device = true;
    device_finished.channels_last = true;  // the kernel writes any layout
    dtrain::data::Loader host(dataset, dtrain::data::ShardedSampler(sampling), host_finished, cuda);
    dtrain::data::Loader device(dataset, dtrain::data::ShardedSampler(sampling), device_finished,
                                cuda);
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      host.start_epoch(epoch);
      device.start_epoch(epoch);
      dtrain::data::Batch a;
      dtrain::data::Batch b;
      int64_t batches = 0;
      while (host.next(a)) {
        REQUIRE(device.next(b));
        CHECK(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
        REQUIRE(torch::equal(a.labels, b.labels));
        const double worst = (a.images - b.images).abs().max().item<double>();
        CAPTURE(epoch, batches, worst);
        CHECK(worst < 1e-4);
        ++batches;
      }
      CHECK(!device.next(b));
      CHECK(batches == 3);
    }
  }
}

TEST_CASE("loader: a damaged file is an error naming it when the GPU finishes the batches "
          "(skipped on CPU)",
          "[image_pipeline]") {
  if (!torch::cuda::is_available() || !dtrain::data::can_resample_on_device()) {
    WARN("no CUDA device or no resampling kernel in this build: skipped");
    return;
  }
  test::TempDir dir;
  write_folder(dir.path(), 4);
  std::vector<uint8_t> cut = test::png_rgb(64, 64, picture(64, 64, 3));
  cut.resize(cut.size() - 30);
  const fs::path damaged = dir.path() / "train" / "odd" / "5.png";
  test::write_bytes(damaged, cut);
  std::shared_ptr<const dtrain::data::Dataset> dataset =
      dtrain::data::open_dataset(folder_options(dir), Split::kTrain);
  dtrain::data::LoaderOptions loading;
  loading.num_workers = 2;
  loading.finish_on_device = true;
  dtrain::data::Loader loader(dataset, dtrain::data::ShardedSampler(sampler_options(*dataset, false)),
                              loading, torch::Device(torch::kCUDA, 0));
  loader.start_epoch(0);
  dtrain::data::Batch batch;
  REQUIRE_THROWS_WITH([&] { while (loader.next(batch)) {} }(),
                      Catch::Contains(damaged.string() + ": truncated: no PNG"));
}
