#include "common/files.h"

#include <fmt/format.h>
#include <torch/serialize/output-archive.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <system_error>
#include <vector>

#include "common/error.h"

namespace dtrain {
namespace {

// A file that remembers the first failed write and is removed unless close() succeeds.
class CheckedFile {
 public:
  explicit CheckedFile(std::filesystem::path path)
      : path_(std::move(path)), file_(std::fopen(path_.c_str(), "wb")) {
    if (file_ == nullptr) {
      throw UserError(fmt::format("{}: cannot create: {}", path_.string(), std::strerror(errno)));
    }
  }
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  ~CheckedFile() {
    if (file_ == nullptr) return;
    std::fclose(file_);
    remove_partial();
  }

  void write(const void* data, size_t size) {
    if (error_ == 0 && size > 0 && std::fwrite(data, 1, size, file_) != size) error_ = errno;
  }

  void close() {
    if (std::fflush(file_) != 0 && error_ == 0) error_ = errno;
    const int closed = std::fclose(file_);
    file_ = nullptr;
    if (closed != 0 && error_ == 0) error_ = errno;
    if (error_ == 0) return;
    remove_partial();
    throw UserError(fmt::format("{}: cannot write: {}", path_.string(), std::strerror(error_)));
  }

 private:
  void remove_partial() const {
    std::error_code ignored;
    if (std::filesystem::is_regular_file(path_, ignored)) std::filesystem::remove(path_, ignored);
  }

  std::filesystem::path path_;
  std::FILE* file_;
  int error_ = 0;
};

}  // namespace

void remove_tree(const std::filesystem::path& path) {
  namespace fs = std::filesystem;
  std::error_code ignored;
  if (fs::is_directory(fs::symlink_status(path, ignored))) {
    std::vector<fs::path> children;
    for (const fs::directory_entry& entry : fs::directory_iterator(path, ignored)) {
      children.push_back(entry.path());
    }
    for (const fs::path& child : children) remove_tree(child);
  }
  fs::remove(path, ignored);
}

void write_whole_file(const std::filesystem::path& path, std::string_view bytes) {
  CheckedFile file(path);
  file.write(bytes.data(), bytes.size());
  file.close();
}

void save_archive(torch::serialize::OutputArchive& archive, const std::string& path) {
  CheckedFile file(path);
  // The writer reports every byte taken, so torch's own checks never fire; the file keeps the
  // error for close().
  archive.save_to([&file](const void* data, size_t size) {
    file.write(data, size);
    return size;
  });
  file.close();
}

}  // namespace dtrain
