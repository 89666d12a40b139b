// libFuzzer target: the image-folder decoding path, the completeness check of image_file.h
// then OpenCV's JPEG and PNG decoders (not instrumented themselves; ASan still sees their heap
// through its allocator). An accepted image must be 8-bit BGR and not empty; the file check
// must agree with the in-memory one.
#include "data/image_file.h"
#include "memory_file.h"

#include <opencv2/core.hpp>

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dtrain::fuzz::MemoryFile file;
  const std::vector<uint8_t> bytes(data, data + size);
  const std::string problem = dtrain::data::image_bytes_problem(bytes);
  if (dtrain::data::image_file_problem(file.write(data, size)) != problem) __builtin_trap();
  cv::Mat bgr;
  const std::string decode_problem = dtrain::data::decode_image(bytes, bgr);
  if (!problem.empty() && decode_problem != problem) __builtin_trap();
  if (decode_problem.empty() && (bgr.empty() || bgr.type() != CV_8UC3)) __builtin_trap();
  return 0;
}
