// libFuzzer target: the config loader (TOML file and one --set override), through the same
// load_config() as the trainer. Input: the file's bytes; after a 0 byte, if any, the override.
// A ConfigError (or a UserError about the file) is the expected answer to a bad config;
// anything else is a finding: a crash, a sanitizer report, another exception, or a config
// that loads but whose saved form (to_toml, written beside every run) does not load back to
// itself.
#include "common/error.h"
#include "memory_file.h"
#include "trainer/config.h"

#include <algorithm>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static dtrain::fuzz::MemoryFile file;
  static dtrain::fuzz::MemoryFile saved;
  const uint8_t* end = data + size;
  const uint8_t* split = std::find(data, end, uint8_t{0});
  std::vector<std::string> overrides;
  if (split != end) overrides.emplace_back(split + 1, end);
  const std::string& path = file.write(data, static_cast<size_t>(split - data));
  std::vector<std::string> warnings;
  std::string written;
  try {
    written = dtrain::trainer::to_toml(dtrain::trainer::load_config(path, overrides, warnings));
  } catch (const dtrain::trainer::ConfigError&) {
    return 0;
  } catch (const dtrain::UserError&) {
    return 0;
  }
  const std::string& again = saved.write(reinterpret_cast<const uint8_t*>(written.data()),
                                         written.size());
  if (dtrain::trainer::to_toml(dtrain::trainer::load_config(again, {}, warnings)) != written) {
    __builtin_trap();
  }
  return 0;
}
