// File-system helpers that behave the same under every LibTorch.
#pragma once

#include <filesystem>

namespace dtrain {

// Removes `path` and everything below it; a missing path is not an error.
// Not std::filesystem::remove_all: PyTorch 2.x wheels' libtorch_cpu.so exports its own copy of
// std::filesystem, which interposes libstdc++'s, and its remove_all jumps to a null pointer.
void remove_tree(const std::filesystem::path& path);

}  // namespace dtrain
