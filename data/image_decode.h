// Decoding a region of a JPEG (libjpeg-turbo) or PNG (libpng) file into 8-bit RGB, with the
// same pixels as OpenCV's cv::imdecode(IMREAD_COLOR) gives for that region (after BGR -> RGB).
// A JPEG decodes only the rows and iMCU columns the region needs, which is what makes a
// random-resized crop cheap; a PNG decodes whole.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dtrain::data {

// The most pixels (height x width) of an image that decode_region() accepts: 16384 x 16384.
// A progressive JPEG of this size holds up to 1.5 GiB of coefficients (4:4:4) while it decodes.
constexpr int64_t kMaxImagePixels = int64_t{1} << 28;

// A rectangle of an image, in pixels of the full image.
struct ImageRegion {
  int top = 0, left = 0, height = 0, width = 0;
};

// Decoded pixels of a region: 8-bit RGB, row-major HWC, height x width x 3 bytes.
struct DecodedRegion {
  int height = 0, width = 0;
  std::vector<uint8_t> rgb;
};

// Decodes the region of the JPEG or PNG in `bytes` that `choose` picks. Steps:
//   1. image_bytes_problem() (image_file.h): signature and end marker;
//   2. the header: the full image's height and width (at most kMaxImagePixels pixels);
//   3. choose(height, width) returns the region wanted, which must lie inside the image and
//      hold at least one pixel;
//   4. that region's pixels into `out` (out.rgb resized to height x width x 3).
// Returns "" or one phrase saying what is wrong ("truncated: ...", "corrupt: <the decoder's
// message>", "unsupported: ...", "region ... outside ..."); after a problem `out` holds no
// meaningful pixels. Damage in a JPEG that libjpeg reports only as a warning ("Corrupt JPEG
// data: ...") is a problem too, not a partly grey image, but damage below a JPEG region's last
// row goes unseen: decoding stops there. An exception thrown by `choose` propagates.
// Thread-safe: each call owns its decoder; nothing is printed, nothing exits.
// EXIF orientation is not applied (OpenCV's IMREAD_COLOR does; PIL, as torchvision loads
// images, does not): the pixels are those stored in the file.
std::string decode_region(const std::vector<uint8_t>& bytes,
                          const std::function<ImageRegion(int height, int width)>& choose,
                          DecodedRegion& out);

}  // namespace dtrain::data
