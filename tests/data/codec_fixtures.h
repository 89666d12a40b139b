// Test helpers that encode JPEGs with libjpeg's compressor and PNGs with libpng's writer, in
// every layout the decoder must handle (chroma subsampling, progressive, CMYK; grey, palette,
// alpha, 16-bit, interlaced), and the pixel patterns to fill them with.
#pragma once

#include "fixtures.h"
#include "source_dir.h"

#include <png.h>

#include <cstdint>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including them
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <jpeglib.h>

namespace dtrain::data::test {

// Smooth ramps, sharp-edged tiles and a little noise: chroma that changes across a pixel, so
// that upsampling differences show, at sizes that compress like photographs.
inline std::vector<uint8_t> pattern(int width, int height, int channels, unsigned seed) {
  std::mt19937 random(seed);
  std::vector<uint8_t> samples(static_cast<size_t>(width) * height * channels);
  size_t i = 0;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      const int tile = ((x / 7) ^ (y / 5)) & 3;
      for (int c = 0; c < channels; ++c) {
        const int value = x * (2 + c) + y * (3 - c) + tile * 40 * (c + 1) +
                          static_cast<int>(random() % 24);
        samples[i++] = static_cast<uint8_t>(value & 255);
      }
    }
  }
  return samples;
}

struct JpegLayout {
  int components = 3;                      // 1 grey, 3 RGB, 4 CMYK
  int luma_h = 2, luma_v = 2;              // sampling factors of the first component: 2x2 is 4:2:0
  J_COLOR_SPACE stored = JCS_UNKNOWN;      // as jpeg_set_defaults() picks, or JCS_YCCK / JCS_RGB
  bool progressive = false;
  bool arithmetic = false;
  int restart_rows = 0;
  int quality = 90;
};

// `samples`: width x height x layout.components bytes (grey, RGB, or Adobe's inverted CMYK).
inline std::vector<uint8_t> jpeg_file(int width, int height, const JpegLayout& layout,
                                      const std::vector<uint8_t>& samples) {
  jpeg_compress_struct info{};
  jpeg_error_mgr errors{};
  info.err = jpeg_std_error(&errors);  // valid parameters only: it never fails
  jpeg_create_compress(&info);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&info, &buffer, &size);
  info.image_width = static_cast<JDIMENSION>(width);
  info.image_height = static_cast<JDIMENSION>(height);
  info.input_components = layout.components;
  info.in_color_space = layout.components == 1   ? JCS_GRAYSCALE
                        : layout.components == 4 ? JCS_CMYK
                                                 : JCS_RGB;
  jpeg_set_defaults(&info);
  if (layout.stored != JCS_UNKNOWN) jpeg_set_colorspace(&info, layout.stored);
  jpeg_set_quality(&info, layout.quality, TRUE);
  info.comp_info[0].h_samp_factor = layout.components == 1 ? 1 : layout.luma_h;
  info.comp_info[0].v_samp_factor = layout.components == 1 ? 1 : layout.luma_v;
  if (layout.progressive) jpeg_simple_progression(&info);
  info.arith_code = layout.arithmetic ? TRUE : FALSE;
  info.restart_in_rows = layout.restart_rows;
  jpeg_start_compress(&info, TRUE);
  const size_t row_size = static_cast<size_t>(width) * layout.components;
  while (info.next_scanline < info.image_height) {
    auto* row = const_cast<JSAMPLE*>(samples.data() + info.next_scanline * row_size);
    jpeg_write_scanlines(&info, &row, 1);
  }
  jpeg_finish_compress(&info);
  std::vector<uint8_t> file(buffer, buffer + size);
  std::free(buffer);
  jpeg_destroy_compress(&info);
  return file;
}

struct PngLayout {
  int colour = PNG_COLOR_TYPE_RGB;  // PNG_COLOR_TYPE_GRAY, _GRAY_ALPHA, _RGB, _RGB_ALPHA, _PALETTE
  int bit_depth = 8;
  bool interlaced = false;
  bool transparency = false;  // a tRNS chunk (palette and grey)
};

// The rows' bytes as stored (samples packed below 8 bits, big-endian at 16) come from `seed`:
// any bytes are valid, a palette image having all 2^bit_depth entries.
inline std::vector<uint8_t> png_file(int width, int height, const PngLayout& layout,
                                     unsigned seed) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  std::vector<uint8_t> file;
  png_set_write_fn(
      png, &file,
      [](png_structp png, png_bytep data, size_t size) {
        auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
        out->insert(out->end(), data, data + size);
      },
      nullptr);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height),
               layout.bit_depth, layout.colour,
               layout.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  const int entries = 1 << layout.bit_depth;
  std::vector<png_color> palette(static_cast<size_t>(entries));
  std::vector<png_byte> alphas(static_cast<size_t>(entries));
  for (int i = 0; i < entries; ++i) {
    palette[i] = {static_cast<png_byte>(i * 37), static_cast<png_byte>(255 - i),
                  static_cast<png_byte>(i * 11 + 5)};
    alphas[i] = static_cast<png_byte>(i * 53);
  }
  if (layout.colour == PNG_COLOR_TYPE_PALETTE) {
    png_set_PLTE(png, info, palette.data(), entries);
    if (layout.transparency) png_set_tRNS(png, info, alphas.data(), entries, nullptr);
  } else if (layout.transparency) {
    png_color_16 grey{};
    grey.gray = 1;
    png_set_tRNS(png, info, nullptr, 0, &grey);
  }
  png_write_info(png, info);
  const size_t row_size = png_get_rowbytes(png, info);
  std::vector<uint8_t> samples = pattern(static_cast<int>(row_size), height, 1, seed);
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) rows[y] = samples.data() + y * row_size;
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return file;
}

// A named encoded image.
struct Fixture {
  std::string name;
  std::vector<uint8_t> bytes;
};

// gradient32.jpg (written by OpenCV), then JPEGs of every layout, at odd sizes whose regions
// cross iMCU edges.
inline std::vector<Fixture> jpeg_fixtures() {
  const fs::path gradient = fs::path(DTRAIN_SOURCE_DIR) / "tests/data/files/gradient32.jpg";
  std::vector<Fixture> fixtures = {{"gradient32.jpg", read_bytes(gradient)}};
  auto add = [&fixtures](const std::string& name, int width, int height, JpegLayout layout) {
    const auto samples = pattern(width, height, layout.components, fixtures.size());
    fixtures.push_back({name, jpeg_file(width, height, layout, samples)});
  };
  for (auto [width, height] : {std::pair{37, 23}, std::pair{250, 187}}) {
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    add("4:2:0 " + size, width, height, {});
    add("4:4:4 " + size, width, height, {3, 1, 1});
    add("4:2:2 " + size, width, height, {3, 2, 1});
    add("4:4:0 " + size, width, height, {3, 1, 2});
    add("grey " + size, width, height, {1});
    add("CMYK " + size, width, height, {4, 1, 1});
    add("YCCK 4:2:0 " + size, width, height, {4, 2, 2, JCS_YCCK});
    add("progressive 4:2:0 " + size, width, height, {3, 2, 2, JCS_UNKNOWN, true});
    add("progressive grey " + size, width, height, {1, 1, 1, JCS_UNKNOWN, true});
  }
  add("RGB stored as RGB 4:4:4", 61, 45, {3, 1, 1, JCS_RGB});
  add("4:1:1", 250, 187, {3, 4, 1});
  add("arithmetic-coded 4:2:0", 250, 187, {3, 2, 2, JCS_UNKNOWN, false, true});
  add("restart markers 4:2:0", 250, 187, {3, 2, 2, JCS_UNKNOWN, false, false, 1});
  add("4:2:0 1x1", 1, 1, {});
  add("4:2:0 3x200", 3, 200, {});
  add("4:2:0 200x3", 200, 3, {});
  return fixtures;
}

// PNGs of every colour type and bit depth; the last three: two interlaced ones and a 1x1.
inline std::vector<Fixture> png_fixtures() {
  std::vector<Fixture> fixtures;
  auto add = [&fixtures](const std::string& name, PngLayout layout, int width = 45,
                         int height = 31) {
    fixtures.push_back({name, png_file(width, height, layout, fixtures.size())});
  };
  for (int depth : {1, 2, 4, 8, 16}) add("grey " + std::to_string(depth) + "-bit", {0, depth});
  add("grey 8-bit, transparent grey", {PNG_COLOR_TYPE_GRAY, 8, false, true});
  for (int depth : {8, 16}) {
    const std::string bits = std::to_string(depth) + "-bit";
    add("grey+alpha " + bits, {PNG_COLOR_TYPE_GRAY_ALPHA, depth});
    add("RGB " + bits, {PNG_COLOR_TYPE_RGB, depth});
    add("RGBA " + bits, {PNG_COLOR_TYPE_RGB_ALPHA, depth});
  }
  for (int depth : {1, 2, 4, 8}) {
    add("palette " + std::to_string(depth) + "-bit", {PNG_COLOR_TYPE_PALETTE, depth});
  }
  add("palette 8-bit, transparent entries", {PNG_COLOR_TYPE_PALETTE, 8, false, true});
  add("RGB interlaced", {PNG_COLOR_TYPE_RGB, 8, true});
  add("palette 4-bit interlaced", {PNG_COLOR_TYPE_PALETTE, 4, true});
  add("RGB 1x1", {}, 1, 1);
  return fixtures;
}

inline Fixture fixture_named(const std::vector<Fixture>& fixtures, const std::string& name) {
  for (const Fixture& fixture : fixtures) {
    if (fixture.name == name) return fixture;
  }
  throw std::runtime_error("no fixture named " + name);
}

}  // namespace dtrain::data::test
