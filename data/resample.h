// The last stage of an image sample: a decoded RGB region resized, cut to size x size, maybe
// mirrored, and normalised. One definition, compiled for the host (loader threads) and for
// CUDA (data/resample_cuda.cu, a whole batch per launch), so both ends give the same sample.
//
// The filters are OpenCV's, which the torchvision-style transforms of data/crop_plan.h were
// first written with: area averaging (INTER_AREA) when the region shrinks in both directions,
// which does not alias, like PIL's antialiased resize that torchvision uses; bilinear with
// half-pixel centres (INTER_LINEAR) otherwise. OpenCV rounds its 8-bit result (and its
// bilinear weights to 11 bits); this stays in float, so the two differ by under one level of
// 255 (tests/data/image_pipeline_test.cpp measures it).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#ifdef __CUDACC__
#define DTRAIN_HOST_DEVICE __host__ __device__
#else
#define DTRAIN_HOST_DEVICE
#endif

namespace dtrain::data {

// Where one sample's pixels are and what to make of them. Plain data: copied to the device
// as it is, one per sample of a batch.
struct ResampleGeometry {
  int64_t offset = 0;  // first byte of the region, HWC RGB, in the batch's pixel buffer
  int32_t height = 0;  // of the decoded region
  int32_t width = 0;
  int32_t resized_height = 0;  // the region is resized to this ...
  int32_t resized_width = 0;
  int32_t top = 0;  // ... and the output is its size x size window from (top, left)
  int32_t left = 0;
  int32_t flip = 0;  // mirror the window left to right
  int32_t label = 0;
};

// The ImageNet statistics that every image-folder sample is normalised with:
// value = byte * scale[c] + bias[c] = (byte / 255 - mean[c]) / std[c].
struct PixelNormalisation {
  float scale[3];
  float bias[3];
};
inline PixelNormalisation imagenet_normalisation() {
  const double mean[3] = {0.485, 0.456, 0.406};
  const double std[3] = {0.229, 0.224, 0.225};
  PixelNormalisation n{};
  for (int c = 0; c < 3; ++c) {
    n.scale[c] = static_cast<float>(1.0 / (255.0 * std[c]));
    n.bias[c] = static_cast<float>(-mean[c] / std[c]);
  }
  return n;
}

// The source pixels that one output pixel averages along one axis: `count` pixels from
// `first`, weighted first_weight, then middle_weight each, then last_weight (the weights sum
// to 1). Five numbers rather than a list, so a CUDA thread keeps them in registers.
struct Taps {
  int first = 0;
  int count = 0;
  float first_weight = 0.f;
  float middle_weight = 0.f;
  float last_weight = 0.f;

  DTRAIN_HOST_DEVICE float weight(int i) const {
    return i == 0 ? first_weight : i == count - 1 ? last_weight : middle_weight;
  }
};

// Axis of `source` pixels resized to `resized`; output coordinate `d` (0 <= d < resized).
// Area: the output cell [d * s, (d + 1) * s) (s = source / resized) covers whole source pixels
// and parts of the two at its ends, weighted by the part covered; OpenCV drops parts under
// 1/1000 of a pixel and so does this.
DTRAIN_HOST_DEVICE inline Taps area_taps(int source, int resized, int d) {
  const double scale = static_cast<double>(source) / resized;
  const double begin = d * scale;
  const double end = begin + scale;
  const double cell = scale < source - begin ? scale : source - begin;
  int whole_first = static_cast<int>(ceil(begin));
  int whole_end = static_cast<int>(floor(end));
  if (whole_end > source - 1) whole_end = source - 1;
  if (whole_first > whole_end) whole_first = whole_end;
  const bool lead = whole_first - begin > 1e-3;
  const bool trail = end - whole_end > 1e-3;
  const int whole = whole_end - whole_first;
  const double trail_part = end - whole_end < 1.0 ? end - whole_end : 1.0;
  const auto lead_weight = static_cast<float>((whole_first - begin) / cell);
  const auto middle_weight = static_cast<float>(1.0 / cell);
  const auto trail_weight = static_cast<float>((trail_part < cell ? trail_part : cell) / cell);
  Taps taps;
  taps.first = lead ? whole_first - 1 : whole_first;
  taps.count = static_cast<int>(lead) + whole + static_cast<int>(trail);
  taps.middle_weight = middle_weight;
  taps.first_weight = lead ? lead_weight : whole > 0 ? middle_weight : trail_weight;
  taps.last_weight = trail ? trail_weight : whole > 0 ? middle_weight : lead_weight;
  return taps;
}

// Bilinear: the output pixel's centre (d + 0.5) * s - 0.5 between two source pixels; clamped
// to the edge pixel outside [0, source - 1].
DTRAIN_HOST_DEVICE inline Taps linear_taps(int source, int resized, int d) {
  const double scale = static_cast<double>(source) / resized;
  const double centre = (d + 0.5) * scale - 0.5;
  int first = static_cast<int>(floor(centre));
  double fraction = centre - first;
  if (first < 0) {
    first = 0;
    fraction = 0;
  }
  if (first >= source - 1) {
    first = source - 1;
    fraction = 0;
  }
  Taps taps;
  taps.first = first;
  taps.count = fraction > 0 ? 2 : 1;
  taps.first_weight = static_cast<float>(1.0 - fraction);
  taps.last_weight = fraction > 0 ? static_cast<float>(fraction) : taps.first_weight;
  return taps;
}

DTRAIN_HOST_DEVICE inline bool uses_area(const ResampleGeometry& g) {
  return g.resized_width < g.width && g.resized_height < g.height;
}

// The pixel that `rows` x `columns` of the region (width `width`) average, normalised.
DTRAIN_HOST_DEVICE inline void weighted_sum(const uint8_t* region, int width, const Taps& rows,
                                            const Taps& columns, const PixelNormalisation& norm,
                                            float rgb[3]) {
  float sum[3] = {0.f, 0.f, 0.f};
  for (int i = 0; i < rows.count; ++i) {
    const uint8_t* line = region + static_cast<int64_t>(rows.first + i) * width * 3;
    float line_sum[3] = {0.f, 0.f, 0.f};
    for (int j = 0; j < columns.count; ++j) {
      const uint8_t* pixel = line + (columns.first + j) * 3;
      for (int c = 0; c < 3; ++c) line_sum[c] += columns.weight(j) * pixel[c];
    }
    for (int c = 0; c < 3; ++c) sum[c] += rows.weight(i) * line_sum[c];
  }
  for (int c = 0; c < 3; ++c) rgb[c] = sum[c] * norm.scale[c] + norm.bias[c];
}

// The taps of output column x (or row y) of the size x size window.
DTRAIN_HOST_DEVICE inline Taps column_taps(const ResampleGeometry& g, int size, int x) {
  const int column = g.left + (g.flip ? size - 1 - x : x);
  return uses_area(g) ? area_taps(g.width, g.resized_width, column)
                      : linear_taps(g.width, g.resized_width, column);
}
DTRAIN_HOST_DEVICE inline Taps row_taps(const ResampleGeometry& g, int y) {
  return uses_area(g) ? area_taps(g.height, g.resized_height, g.top + y)
                      : linear_taps(g.height, g.resized_height, g.top + y);
}

// Output pixel (y, x) of the size x size window, channels 0-2 normalised into rgb[0..2].
// `pixels` is the batch's pixel buffer.
DTRAIN_HOST_DEVICE inline void resample_pixel(const uint8_t* pixels, const ResampleGeometry& g,
                                              int size, int y, int x,
                                              const PixelNormalisation& norm, float rgb[3]) {
  weighted_sum(pixels + g.offset, g.width, row_taps(g, y), column_taps(g, size, x), norm, rgb);
}

// The sample of geometry `g` on the host: out[3, size, size]. The same sums as
// resample_pixel(), in the same order, in two passes: each region row's sums over every
// output column's taps (weighted_sum's line_sum) once, then each output pixel's over its rows,
// where resample_pixel() works out every line sum again for every output row.
inline void resample_on_host(const uint8_t* pixels, const ResampleGeometry& g, int size,
                             const PixelNormalisation& norm, float* out) {
  std::vector<Taps> columns(static_cast<size_t>(size));
  for (int x = 0; x < size; ++x) columns[static_cast<size_t>(x)] = column_taps(g, size, x);
  std::vector<Taps> rows(static_cast<size_t>(size));
  for (int y = 0; y < size; ++y) rows[static_cast<size_t>(y)] = row_taps(g, y);
  const int first_row = rows.front().first;
  const int end_row = rows.back().first + rows.back().count;
  // line_sums[r - first_row][x][c]
  std::vector<float> line_sums(static_cast<size_t>(end_row - first_row) * size * 3);
  const uint8_t* region = pixels + g.offset;
  for (int r = first_row; r < end_row; ++r) {
    const uint8_t* line = region + static_cast<int64_t>(r) * g.width * 3;
    float* sums = line_sums.data() + static_cast<size_t>(r - first_row) * size * 3;
    for (int x = 0; x < size; ++x) {
      const Taps& taps = columns[static_cast<size_t>(x)];
      float line_sum[3] = {0.f, 0.f, 0.f};
      for (int j = 0; j < taps.count; ++j) {
        const uint8_t* pixel = line + (taps.first + j) * 3;
        for (int c = 0; c < 3; ++c) line_sum[c] += taps.weight(j) * pixel[c];
      }
      for (int c = 0; c < 3; ++c) sums[x * 3 + c] = line_sum[c];
    }
  }
  const int64_t plane = static_cast<int64_t>(size) * size;
  for (int y = 0; y < size; ++y) {
    const Taps& taps = rows[static_cast<size_t>(y)];
    for (int x = 0; x < size; ++x) {
      float sum[3] = {0.f, 0.f, 0.f};
      for (int i = 0; i < taps.count; ++i) {
        const float* line_sum =
            line_sums.data() + (static_cast<size_t>(taps.first + i - first_row) * size + x) * 3;
        for (int c = 0; c < 3; ++c) sum[c] += taps.weight(i) * line_sum[c];
      }
      for (int c = 0; c < 3; ++c) {
        out[c * plane + static_cast<int64_t>(y) * size + x] = sum[c] * norm.scale[c] + norm.bias[c];
      }
    }
  }
}

}  // namespace dtrain::data
