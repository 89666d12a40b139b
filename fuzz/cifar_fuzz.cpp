// libFuzzer target: the CIFAR-10 binary reader, gzip or plain, through the same read_file()
// and validation as training; every sample is then read with and without augmentation.
// A UserError is the expected answer to a bad file; anything else is a finding.
#include "common/error.h"
#include "data/readers.h"
#include "memory_file.h"

#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dtrain::fuzz::MemoryFile file;
  const std::string path = file.write(data, size);
  try {
    for (const bool augment : {false, true}) {
      const auto dataset = dtrain::data::open_cifar10_files({path}, augment);
      std::vector<float> out(static_cast<size_t>(dataset->shape().numel()));
      for (int64_t i = 0; i < dataset->size(); ++i) {
        const int64_t label = dataset->get(i, out.data(), static_cast<uint64_t>(i));
        if (label < 0 || label >= dataset->num_classes()) __builtin_trap();
      }
    }
  } catch (const dtrain::UserError&) {
  }
  return 0;
}
