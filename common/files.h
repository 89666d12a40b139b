// File-system helpers that behave the same under every LibTorch.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace torch::serialize {
class OutputArchive;
}

namespace dtrain {

// Removes `path` and everything below it; a missing path is not an error.
// Not std::filesystem::remove_all: PyTorch 2.x wheels' libtorch_cpu.so exports its own copy of
// std::filesystem, which interposes libstdc++'s, and its remove_all jumps to a null pointer.
void remove_tree(const std::filesystem::path& path);

// Writes `bytes` as the whole of `path`. Every write and the close are checked: a failure (a
// full disk) is a UserError naming the file and the system's reason, and the partial file is
// removed.
void write_whole_file(const std::filesystem::path& path, std::string_view bytes);

// torch's archive written to `path` with the checks of write_whole_file, streamed (no copy in
// memory). Not OutputArchive::save_to(path): its writer throws from a destructor when the disk
// fills, which ends the process in std::terminate with a stack trace.
void save_archive(torch::serialize::OutputArchive& archive, const std::string& path);

}  // namespace dtrain
