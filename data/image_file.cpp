#include "data/image_file.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

namespace dtrain::data {

namespace {

constexpr std::array<uint8_t, 3> kJpegStart = {0xff, 0xd8, 0xff};
constexpr std::array<uint8_t, 8> kPngStart = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
// The IEND chunk: length 0, type "IEND", the CRC-32 of "IEND".
constexpr std::array<uint8_t, 12> kPngEnd = {0,   0,   0,   0,    'I',  'E',
                                             'N', 'D', 0xae, 0x42, 0x60, 0x82};

template <size_t N>
bool starts_with(const std::vector<uint8_t>& bytes, const std::array<uint8_t, N>& prefix) {
  return bytes.size() >= N && std::equal(prefix.begin(), prefix.end(), bytes.begin());
}

std::string jpeg_tail_problem(const std::vector<uint8_t>& tail) {
  // The last FF D9, searching backwards; what follows it is padding or a trailer.
  for (size_t i = tail.size(); i >= 2; --i) {
    if (tail[i - 2] != 0xff || tail[i - 1] != 0xd9) continue;
    for (size_t j = i; j + 1 < tail.size(); ++j) {
      if (tail[j] == 0xff && tail[j + 1] == 0xda) {
        return "truncated: image data (a JPEG start-of-scan marker) follows the last "
               "end-of-image marker, which belongs to an embedded thumbnail";
      }
    }
    return "";
  }
  return fmt::format("truncated: no JPEG end-of-image marker (FF D9) in its last {} bytes",
                     tail.size());
}

std::string png_tail_problem(const std::vector<uint8_t>& tail) {
  const auto end = std::search(tail.begin(), tail.end(), kPngEnd.begin(), kPngEnd.end());
  if (end != tail.end()) return "";
  return fmt::format("truncated: no PNG IEND chunk in its last {} bytes", tail.size());
}

std::string errno_text(const char* what) {
  return fmt::format("{}: {}", what, std::strerror(errno));
}

// Opens `path` read-only, hands `read` the descriptor and the file's size, and closes it: the
// problem `read` returns, or that of opening the file.
template <typename Read>
std::string with_open_file(const std::string& path, Read read) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_text("cannot open");
  struct stat info {};
  const std::string problem = ::fstat(fd, &info) != 0
                                  ? errno_text("cannot stat")
                                  : read(fd, static_cast<size_t>(info.st_size));
  ::close(fd);
  return problem;
}

// Exactly `bytes.size()` bytes from `offset`, across short reads and interrupted calls.
std::string read_at(int fd, std::vector<uint8_t>& bytes, size_t offset) {
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::pread(fd, bytes.data() + done, bytes.size() - done,
                                static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return errno_text("cannot read");
    if (got == 0) return "cannot read: the file shrank while being read";
    done += static_cast<size_t>(got);
  }
  return "";
}

}  // namespace

std::string image_ends_problem(const std::vector<uint8_t>& head, const std::vector<uint8_t>& tail) {
  if (head.empty()) return "empty file";
  if (starts_with(head, kJpegStart)) return jpeg_tail_problem(tail);
  if (starts_with(head, kPngStart)) return png_tail_problem(tail);
  std::string start;
  for (size_t i = 0; i < std::min<size_t>(head.size(), 4); ++i) {
    start += fmt::format("{}{:02x}", i > 0 ? " " : "", head[i]);
  }
  return fmt::format("not a JPEG or PNG: it starts with {} (a JPEG starts with ff d8 ff, a PNG "
                     "with 89 50 4e 47)",
                     start);
}

std::string image_bytes_problem(const std::vector<uint8_t>& bytes) {
  const size_t tail_size = std::min(bytes.size(), kImageTailBytes);
  const std::vector<uint8_t> head(bytes.begin(),
                                  bytes.begin() + static_cast<ptrdiff_t>(std::min<size_t>(
                                                      bytes.size(), kPngStart.size())));
  const std::vector<uint8_t> tail(bytes.end() - static_cast<ptrdiff_t>(tail_size), bytes.end());
  return image_ends_problem(head, tail);
}

std::string image_file_problem(const std::string& path) {
  return with_open_file(path, [](int fd, size_t size) {
    std::vector<uint8_t> head(std::min(size, kPngStart.size()));
    std::vector<uint8_t> tail(std::min(size, kImageTailBytes));
    std::string problem = read_at(fd, head, 0);
    if (problem.empty()) problem = read_at(fd, tail, size - tail.size());
    return problem.empty() ? image_ends_problem(head, tail) : problem;
  });
}

std::string read_image_file(const std::string& path, std::vector<uint8_t>& bytes) {
  return with_open_file(path, [&bytes](int fd, size_t size) {
    bytes.resize(size);
    return read_at(fd, bytes, 0);
  });
}


}  // namespace dtrain::data
