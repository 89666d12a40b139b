#include "data/image_decode.h"

#include "data/image_file.h"

#include <fmt/format.h>

#ifdef DTRAIN_IMAGE_CODECS
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE and size_t without including their headers
#include <cstring>

#include <jpeglib.h>
// After jpeglib.h:
#include <jerror.h>
#endif

namespace dtrain::data {

#ifdef DTRAIN_IMAGE_CODECS

namespace {

using Chooser = std::function<ImageRegion(int height, int width)>;

// Both decoders report errors from inside C code by longjmp back to a setjmp: each decoding
// phase that calls the library is a function of its own that sets the jump target and holds
// no object with a destructor; everything that owns memory (the library's state included)
// lives in a decoder object of the caller, destroyed normally after the jump.

// Asks `choose` for the region of a `width` x `height` image, checks it, and sizes `out`.
std::string choose_region(int height, int width, const Chooser& choose, ImageRegion& region,
                          DecodedRegion& out) {
  if (height <= 0 || width <= 0) {
    return fmt::format("corrupt: the header gives a {}x{} image", width, height);
  }
  if (int64_t{height} * width > kMaxImagePixels) {
    return fmt::format("too large: {}x{} pixels, above the {} pixels dtrain decodes", width,
                       height, kMaxImagePixels);
  }
  region = choose(height, width);
  if (region.height < 1 || region.width < 1 || region.top < 0 || region.left < 0 ||
      int64_t{region.top} + region.height > height ||
      int64_t{region.left} + region.width > width) {
    return fmt::format("bad region: rows [{}, {}) x columns [{}, {}) is empty or outside the "
                       "{}x{} image",
                       region.top, int64_t{region.top} + region.height, region.left,
                       int64_t{region.left} + region.width, width, height);
  }
  out.height = region.height;
  out.width = region.width;
  out.rgb.resize(static_cast<size_t>(region.height) * static_cast<size_t>(region.width) * 3);
  return "";
}

// ---- JPEG (libjpeg-turbo) ----

// libjpeg's error manager with the jump target of the running phase and the failure's text.
struct JpegErrors {
  jpeg_error_mgr manager;  // first: libjpeg hands the callbacks &manager as cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr info) {
  auto* errors = reinterpret_cast<JpegErrors*>(info->err);
  info->err->format_message(info, errors->message);
  std::longjmp(errors->jump, 1);
}

// Level -1 is a warning, which in libjpeg means damaged data that it papers over ("Corrupt
// JPEG data: premature end of data segment" fills the rest of the image with grey): a failure
// here. Levels 0 and up are trace messages, dropped.
void jpeg_note(j_common_ptr info, int level) {
  if (level < 0) jpeg_fail(info);
}

void jpeg_print_nothing(j_common_ptr) {}

struct JpegDecoder {
  JpegDecoder() {
    info.err = jpeg_std_error(&errors.manager);
    errors.manager.error_exit = jpeg_fail;
    errors.manager.emit_message = jpeg_note;
    errors.manager.output_message = jpeg_print_nothing;
  }
  // Also right when jpeg_create_decompress never ran or failed: `info` starts zeroed, and
  // libjpeg then has no memory to free.
  ~JpegDecoder() { jpeg_destroy_decompress(&info); }
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  jpeg_decompress_struct info{};
  JpegErrors errors{};
};

std::string jpeg_problem(const JpegErrors& errors) {
  const int code = errors.manager.msg_code;
  const bool unsupported = code == JERR_BAD_PRECISION || code == JERR_SOF_UNSUPPORTED ||
                           code == JERR_CONVERSION_NOTIMPL || code == JERR_NOT_COMPILED;
  return fmt::format("{}: {}", unsupported ? "unsupported" : "corrupt", errors.message);
}

// Phase 1, under setjmp: the header. False on failure, with the message in decoder.errors.
bool jpeg_read_header_into(JpegDecoder& decoder, const std::vector<uint8_t>& bytes) {
  if (setjmp(decoder.errors.jump) != 0) return false;
  jpeg_create_decompress(&decoder.info);
  jpeg_mem_src(&decoder.info, bytes.data(), bytes.size());
  jpeg_read_header(&decoder.info, TRUE);
  return true;
}

// The columns [left, left + width) to have libjpeg decode for the region's columns, given to
// jpeg_crop_scanline(), which moves `left` down to an iMCU boundary (16 pixels for 4:2:0).
// Why wider than the region: libjpeg-turbo (2.1.5 tested) upsamples the chroma of a cropped
// row as if the crop's edges were the image's, so with 4:2:0 or 4:2:2 fancy upsampling the
// crop's first and last columns differ from a full decode: one column of margin on each side
// keeps the region's columns interior. And a crop with 2 or fewer chroma samples (4 pixels)
// switches libjpeg to plain (replicating) upsampling: the crop spans at least one whole iMCU,
// reaching further left when the image's right edge cuts it short. Rows need nothing of the
// kind: jpeg_skip_scanlines() keeps the upsampler's context, and the rows it leads to equal
// a full decode's (tests/data/image_decode_test.cpp checks both on random regions).
struct JpegColumns {
  JDIMENSION left, width;
};

JpegColumns jpeg_columns(const jpeg_decompress_struct& info, const ImageRegion& region) {
  const int image_width = static_cast<int>(info.output_width);
  const int imcu_width = info.max_h_samp_factor * info.min_DCT_scaled_size;
  int left = std::max(region.left - 1, 0) / imcu_width * imcu_width;
  const int right = std::min(std::max(region.left + region.width + 1, left + imcu_width),
                             image_width);
  if (right - left < imcu_width) left = std::max(left - imcu_width, 0);
  return {static_cast<JDIMENSION>(left), static_cast<JDIMENSION>(right - left)};
}

// Adobe's inverted CMYK, as libjpeg hands it over (0 = full ink), to RGB by OpenCV's formula
// (icvCvt_CMYK2BGR_8u_C4C3R): red = k - (255 - c) * k / 256, rounding down.
void cmyk_to_rgb(const uint8_t* cmyk, int pixels, uint8_t* rgb) {
  for (int i = 0; i < pixels; ++i, cmyk += 4, rgb += 3) {
    const int k = cmyk[3];
    for (int c = 0; c < 3; ++c) rgb[c] = static_cast<uint8_t>(k - (((255 - cmyk[c]) * k) >> 8));
  }
}

// Phase 2, under setjmp: decodes the rows of `region` (skipping those above it, stopping
// after its last) and copies its columns into `rgb`.
bool jpeg_decode_rows(JpegDecoder& decoder, const ImageRegion& region, uint8_t* rgb) {
  if (setjmp(decoder.errors.jump) != 0) return false;
  jpeg_decompress_struct* info = &decoder.info;
  jpeg_start_decompress(info);
  JpegColumns columns = jpeg_columns(*info, region);
  if (columns.width < info->output_width) {
    jpeg_crop_scanline(info, &columns.left, &columns.width);
  }
  if (region.top > 0) jpeg_skip_scanlines(info, static_cast<JDIMENSION>(region.top));
  const int components = info->out_color_components;  // 3 (RGB) or 4 (CMYK)
  JSAMPARRAY row = info->mem->alloc_sarray(reinterpret_cast<j_common_ptr>(info), JPOOL_IMAGE,
                                           info->output_width * components, 1);
  const uint8_t* first = row[0] + (region.left - columns.left) * components;
  const JDIMENSION end = static_cast<JDIMENSION>(region.top + region.height);
  for (uint8_t* target = rgb; info->output_scanline < end; target += region.width * 3) {
    jpeg_read_scanlines(info, row, 1);
    if (components == 4) {
      cmyk_to_rgb(first, region.width, target);
    } else {
      std::memcpy(target, first, static_cast<size_t>(region.width) * 3);
    }
  }
  return true;
}

std::string decode_jpeg(const std::vector<uint8_t>& bytes, const Chooser& choose,
                        DecodedRegion& out) {
  JpegDecoder decoder;
  if (!jpeg_read_header_into(decoder, bytes)) return jpeg_problem(decoder.errors);
  jpeg_decompress_struct& info = decoder.info;
  // OpenCV's choice: 4 components are CMYK (or YCCK, which libjpeg turns into CMYK),
  // converted by cmyk_to_rgb(); libjpeg turns everything else (YCbCr, RGB, grey) into RGB.
  // Everything else stays at libjpeg's defaults, as in OpenCV: JDCT_ISLOW, fancy upsampling.
  info.out_color_space = info.num_components == 4 ? JCS_CMYK : JCS_RGB;
  ImageRegion region;
  const std::string problem = choose_region(static_cast<int>(info.image_height),
                                            static_cast<int>(info.image_width), choose, region,
                                            out);
  if (!problem.empty()) return problem;
  if (!jpeg_decode_rows(decoder, region, out.rgb.data())) return jpeg_problem(decoder.errors);
  return "";
}

// ---- PNG (libpng) ----

struct PngDecoder;

[[noreturn]] void png_fail(png_structp png, png_const_charp message);

// Warnings are damage in ancillary chunks that libpng skips (a bad CRC in tEXt, an iCCP
// profile it distrusts): the pixels are whole, as OpenCV decodes them.
void png_ignore_warning(png_structp, png_const_charp) {}

void png_read_bytes(png_structp png, png_bytep data, size_t size);

struct PngDecoder {
  explicit PngDecoder(const std::vector<uint8_t>& bytes) : bytes(bytes) {
    png = png_create_read_struct(PNG_LIBPNG_VER_STRING, this, png_fail, png_ignore_warning);
    if (png != nullptr) info = png_create_info_struct(png);
  }
  ~PngDecoder() { png_destroy_read_struct(&png, &info, nullptr); }
  PngDecoder(const PngDecoder&) = delete;
  PngDecoder& operator=(const PngDecoder&) = delete;

  const std::vector<uint8_t>& bytes;
  size_t position = 0;  // of the next byte libpng reads
  png_structp png = nullptr;
  png_infop info = nullptr;
  char message[200] = "";
  std::vector<uint8_t> pixels;  // the whole image, 8-bit RGB
  std::vector<png_bytep> rows;  // into `pixels`
};

void png_fail(png_structp png, png_const_charp message) {
  auto* decoder = static_cast<PngDecoder*>(png_get_error_ptr(png));
  std::snprintf(decoder->message, sizeof decoder->message, "%s", message);
  png_longjmp(png, 1);
}

void png_read_bytes(png_structp png, png_bytep data, size_t size) {
  auto* decoder = static_cast<PngDecoder*>(png_get_io_ptr(png));
  if (size > decoder->bytes.size() - decoder->position) png_error(png, "the data end early");
  std::memcpy(data, decoder->bytes.data() + decoder->position, size);
  decoder->position += size;
}

// Phase 1, under setjmp: the header, and the transforms to 8-bit RGB that OpenCV's PNG decoder
// (grfmt_png.cpp) asks libpng for with IMREAD_COLOR, so that the pixels match: 16 bits cut to
// their high byte, alpha (and a palette's or grey image's transparency) dropped without
// blending, palette and grey expanded; no gamma correction.
bool png_read_header(PngDecoder& decoder) {
  if (setjmp(png_jmpbuf(decoder.png)) != 0) return false;
  png_structp png = decoder.png;
  png_set_read_fn(png, &decoder, png_read_bytes);
  png_read_info(png, decoder.info);
  const int colour = png_get_color_type(png, decoder.info);
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if ((colour & PNG_COLOR_MASK_COLOR) == 0) {
    png_set_expand_gray_1_2_4_to_8(png);
    png_set_gray_to_rgb(png);
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, decoder.info);
  return true;
}

// Phase 2, under setjmp: the whole image into decoder.rows, then the rest of the file up to
// IEND (whose chunk CRCs, and the deflate stream's end, are checked there).
bool png_read_pixels(PngDecoder& decoder) {
  if (setjmp(png_jmpbuf(decoder.png)) != 0) return false;
  png_read_image(decoder.png, decoder.rows.data());
  png_read_end(decoder.png, nullptr);
  return true;
}

std::string decode_png(const std::vector<uint8_t>& bytes, const Chooser& choose,
                       DecodedRegion& out) {
  PngDecoder decoder(bytes);
  if (decoder.info == nullptr) return "out of memory: libpng cannot start a decoder";
  if (!png_read_header(decoder)) return fmt::format("corrupt: {}", decoder.message);
  const auto height = static_cast<int>(png_get_image_height(decoder.png, decoder.info));
  const auto width = static_cast<int>(png_get_image_width(decoder.png, decoder.info));
  ImageRegion region;
  const std::string problem = choose_region(height, width, choose, region, out);
  if (!problem.empty()) return problem;
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  if (png_get_rowbytes(decoder.png, decoder.info) != row_bytes) {
    return "unsupported: libpng does not turn this PNG into 8-bit RGB";
  }
  decoder.pixels.resize(row_bytes * static_cast<size_t>(height));
  decoder.rows.resize(static_cast<size_t>(height));
  for (int y = 0; y < height; ++y) decoder.rows[y] = decoder.pixels.data() + y * row_bytes;
  if (!png_read_pixels(decoder)) return fmt::format("corrupt: {}", decoder.message);
  const size_t region_row_bytes = static_cast<size_t>(region.width) * 3;
  for (int y = 0; y < region.height; ++y) {
    std::memcpy(out.rgb.data() + y * region_row_bytes,
                decoder.rows[region.top + y] + static_cast<size_t>(region.left) * 3,
                region_row_bytes);
  }
  return "";
}

}  // namespace

std::string decode_region(const std::vector<uint8_t>& bytes, const Chooser& choose,
                          DecodedRegion& out) {
  const std::string problem = image_bytes_problem(bytes);
  if (!problem.empty()) return problem;
  // image_bytes_problem() let through only a JPEG (FF D8 FF ...) or a PNG (89 50 4E 47 ...).
  return bytes[0] == 0xff ? decode_jpeg(bytes, choose, out) : decode_png(bytes, choose, out);
}

#else

std::string decode_region(const std::vector<uint8_t>&,
                          const std::function<ImageRegion(int height, int width)>&,
                          DecodedRegion&) {
  return "this build has no JPEG/PNG decoder (libjpeg-turbo, libpng): install "
         "libjpeg62-turbo-dev and libpng-dev (scripts/setup.sh) and configure again";
}

#endif

}  // namespace dtrain::data
