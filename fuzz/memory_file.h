// A file in memory (memfd) with a path that open() and zlib's gzopen() accept, so that the
// fuzz targets drive the readers through their real file-reading code without touching disk.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

namespace dtrain::fuzz {

class MemoryFile {
 public:
  MemoryFile() : fd_(::memfd_create("dtrain_fuzz", MFD_CLOEXEC)) {
    if (fd_ < 0) std::abort();  // the harness cannot run; not a finding
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;

  // Replaces the content with data[0, size); returns the path to read it from.
  const std::string& write(const uint8_t* data, size_t size) {
    if (::ftruncate(fd_, 0) != 0) std::abort();
    size_t done = 0;
    while (done < size) {
      const ssize_t wrote = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
      if (wrote <= 0) std::abort();
      done += static_cast<size_t>(wrote);
    }
    return path_;
  }

 private:
  int fd_;
  std::string path_;
};

}  // namespace dtrain::fuzz
