// libFuzzer target: the image-folder decoding path, the completeness check of image_file.h
// then the region decoders of image_decode.h (libjpeg-turbo and libpng themselves are not
// instrumented; ASan still sees their heap through its allocator, and every setjmp/longjmp
// error path of ours runs instrumented). The region asked for is drawn from a hash of the
// input, so crops at every offset and size are tried, not only whole images. An accepted image
// must fill exactly its region; the file check must agree with the in-memory one, and a file
// it rejects must be rejected with its words.
#include "data/image_decode.h"
#include "data/image_file.h"
#include "memory_file.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dtrain::fuzz::MemoryFile file;
  const std::vector<uint8_t> bytes(data, data + size);
  const std::string problem = dtrain::data::image_bytes_problem(bytes);
  if (dtrain::data::image_file_problem(file.write(data, size)) != problem) __builtin_trap();
  // The region as fractions of the image, from a hash of the input: each mutation asks for
  // another crop.
  uint32_t hash = 2166136261u;  // FNV-1a
  for (size_t i = 0; i < size; ++i) hash = (hash ^ data[i]) * 16777619u;
  const uint8_t pick[4] = {static_cast<uint8_t>(hash), static_cast<uint8_t>(hash >> 8),
                           static_cast<uint8_t>(hash >> 16), static_cast<uint8_t>(hash >> 24)};
  dtrain::data::ImageRegion region;
  const auto choose = [&](int height, int width) {
    region.top = height * pick[0] / 256;
    region.left = width * pick[1] / 256;
    region.height = 1 + (height - region.top - 1) * pick[2] / 255;
    region.width = 1 + (width - region.left - 1) * pick[3] / 255;
    return region;
  };
  dtrain::data::DecodedRegion out;
  const std::string decode_problem = dtrain::data::decode_region(bytes, choose, out);
  if (!problem.empty() && decode_problem != problem) __builtin_trap();
  if (decode_problem.empty() &&
      (out.height != region.height || out.width != region.width ||
       out.rgb.size() != static_cast<size_t>(region.height) * region.width * 3)) {
    __builtin_trap();
  }
  return 0;
}
