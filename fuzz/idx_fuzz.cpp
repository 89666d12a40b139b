// libFuzzer target: the IDX reader (Fashion-MNIST, MNIST), gzip or plain, through the same
// read_file() and validation as training. Input: a 4-byte big-endian length L, L bytes of the
// image file, then the label file. A UserError is the expected answer to a bad file; anything
// else (a crash, a sanitizer report, another exception) is a finding.
#include "common/error.h"
#include "data/readers.h"
#include "memory_file.h"

#include <algorithm>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dtrain::fuzz::MemoryFile images;
  static dtrain::fuzz::MemoryFile labels;
  if (size < 4) return 0;
  const size_t declared = (size_t{data[0]} << 24) | (size_t{data[1]} << 16) |
                          (size_t{data[2]} << 8) | size_t{data[3]};
  const size_t length = std::min(size - 4, declared);
  const std::string images_path = images.write(data + 4, length);
  const std::string labels_path = labels.write(data + 4 + length, size - 4 - length);
  try {
    const auto dataset = dtrain::data::open_idx_files(images_path, labels_path, 0.5, 0.25);
    // Validation promised that every sample lies inside the file: read them all.
    std::vector<float> out(static_cast<size_t>(dataset->shape().numel()));
    for (int64_t i = 0; i < dataset->size(); ++i) {
      const int64_t label = dataset->get(i, out.data(), 0);
      if (label < 0 || label >= dataset->num_classes()) __builtin_trap();
    }
  } catch (const dtrain::UserError&) {
  }
  return 0;
}
