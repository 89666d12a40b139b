// read_file(): a whole file into memory, gunzipped when it starts with the gzip signature.
// The members are inflated here rather than through zlib's gzread(), because gzread() stops
// without a word at bytes after a member that are not another member (a damaged download, a
// file appended to), and such a file must be an error naming it.
#include "common/error.h"
#include "data/readers.h"

#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <new>

namespace dtrain::data {

namespace {

struct CloseFile {
  void operator()(std::FILE* file) const { std::fclose(file); }
};

struct EndInflate {
  void operator()(z_stream* stream) const { inflateEnd(stream); }
};

// The bytes of `path` as they are on disk.
std::vector<uint8_t> read_raw(const std::string& path) {
  const std::unique_ptr<std::FILE, CloseFile> file(std::fopen(path.c_str(), "rb"));
  if (file == nullptr) {
    throw UserError(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  }
  std::vector<uint8_t> bytes;
  // Reads of doubling size, 64 KiB to 16 MiB: small files cost little, large ones few calls.
  for (size_t chunk = size_t{1} << 16;; chunk = std::min(chunk * 2, size_t{1} << 24)) {
    const size_t old_size = bytes.size();
    bytes.resize(old_size + chunk);
    const size_t got = std::fread(bytes.data() + old_size, 1, chunk, file.get());
    bytes.resize(old_size + got);
    if (got < chunk) break;  // the end of the file, or an error
  }
  if (std::ferror(file.get()) != 0) {
    throw UserError(fmt::format("{}: cannot read: {}", path, std::strerror(errno)));
  }
  return bytes;
}

// RFC 1952: every gzip member starts with ID1 = 0x1f, ID2 = 0x8b.
bool gzip_member_at(const std::vector<uint8_t>& bytes, size_t offset) {
  return bytes.size() - offset >= 2 && bytes[offset] == 0x1f && bytes[offset + 1] == 0x8b;
}

// A first guess at the size of gzip data `in` unpacked: the last member's ISIZE, its
// content's size mod 2^32 (the whole content's for the usual single member), in the last 4
// bytes, little-endian. At least 64 KiB; at most deflate's largest ratio, 1032:1, so that
// damaged last bytes cannot ask for GiBs.
size_t content_size_guess(const std::vector<uint8_t>& in) {
  constexpr size_t kLeast = size_t{1} << 16;
  const size_t n = in.size();
  if (n < 4) return kLeast;
  const size_t isize = uint32_t{in[n - 4]} | uint32_t{in[n - 3]} << 8 |
                       uint32_t{in[n - 2]} << 16 | uint32_t{in[n - 1]} << 24;
  return std::clamp(isize, kLeast, std::max(kLeast, n * 1032));
}

// The content of the gzip members that make up `in`, one after another (RFC 1952: a file of
// several members holds their contents concatenated, as `cat a.gz b.gz` makes).
std::vector<uint8_t> gunzip(const std::string& path, const std::vector<uint8_t>& in) {
  z_stream stream{};
  if (inflateInit2(&stream, 16 + MAX_WBITS) != Z_OK) throw std::bad_alloc();  // gzip only
  const std::unique_ptr<z_stream, EndInflate> end(&stream);
  std::vector<uint8_t> out(content_size_guess(in));
  size_t in_done = 0;
  size_t out_done = 0;
  constexpr size_t kMaxStep = size_t{1} << 30;  // zlib counts in 32 bits
  for (;;) {
    if (out_done == out.size()) out.resize(out.size() * 2);
    stream.next_in = const_cast<Bytef*>(in.data() + in_done);
    stream.avail_in = static_cast<uInt>(std::min(in.size() - in_done, kMaxStep));
    stream.next_out = out.data() + out_done;
    stream.avail_out = static_cast<uInt>(std::min(out.size() - out_done, kMaxStep));
    const uInt in_before = stream.avail_in;
    const uInt out_before = stream.avail_out;
    const int code = inflate(&stream, Z_NO_FLUSH);
    in_done += in_before - stream.avail_in;
    out_done += out_before - stream.avail_out;
    if (code == Z_STREAM_END) {
      if (in_done == in.size()) break;
      if (!gzip_member_at(in, in_done)) {
        const size_t over = in.size() - in_done;
        throw UserError(fmt::format("{}: corrupt: the gzip data ends at byte {} of {}, and the "
                                    "{} after it {} not another gzip member; download the file "
                                    "again",
                                    path, in_done, in.size(), count_of(over, "byte"),
                                    over == 1 ? "is" : "are"));
      }
      inflateReset(&stream);
    } else if (code == Z_OK || code == Z_BUF_ERROR) {
      // Room left for output means inflate() stopped for want of input: there is no more.
      if (in_done == in.size() && stream.avail_out > 0) {
        throw UserError(fmt::format("{}: truncated: the gzip data stops short after the file's "
                                    "{} bytes ({} bytes unpacked); download the file again",
                                    path, in.size(), out_done));
      }
    } else if (code == Z_MEM_ERROR) {
      throw std::bad_alloc();
    } else {
      throw UserError(fmt::format("{}: corrupt gzip data ({}) at byte {}; download the file "
                                  "again",
                                  path, stream.msg != nullptr ? stream.msg : "no detail",
                                  in_done));
    }
  }
  out.resize(out_done);
  out.shrink_to_fit();
  return out;
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes = read_raw(path);
  if (gzip_member_at(bytes, 0)) return gunzip(path, bytes);
  return bytes;
}

}  // namespace dtrain::data
