// Test helpers that write dataset fixtures (IDX, CIFAR-10, PNG) into a temporary folder.
#pragma once

#include "common/error.h"
#include "common/files.h"
#include "data/dataset.h"

#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace dtrain::data::test {

namespace fs = std::filesystem;

// A fresh folder under the system temporary directory, removed with its content.
class TempDir {
 public:
  TempDir() {
    std::random_device device;
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = fs::temp_directory_path() / ("dtrain_data_test_" + std::to_string(device()));
      if (fs::create_directory(path_)) return;
    }
    throw std::runtime_error("cannot create a temporary directory");
  }
  ~TempDir() { dtrain::remove_tree(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const fs::path& path() const { return path_; }
  std::string str() const { return path_.string(); }

 private:
  fs::path path_;
};

// The UserError of opening `options`, or "" when it opened.
inline std::string open_error(const DataOptions& options, Split split = Split::kTrain) {
  try {
    open_dataset(options, split);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

inline void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

inline void write_gz(const fs::path& path, const std::vector<uint8_t>& bytes) {
  fs::create_directories(path.parent_path());
  gzFile file = gzopen(path.string().c_str(), "wb");
  if (file == nullptr) throw std::runtime_error("cannot write " + path.string());
  gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
}

// `bytes` as one gzip member (RFC 1952), in memory.
inline std::vector<uint8_t> gzip_bytes(const std::vector<uint8_t>& bytes) {
  z_stream stream{};
  if (deflateInit2(&stream, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
                   Z_DEFAULT_STRATEGY) != Z_OK) {
    throw std::runtime_error("deflateInit2 failed");
  }
  std::vector<uint8_t> out(deflateBound(&stream, static_cast<uLong>(bytes.size())));
  stream.next_in = const_cast<Bytef*>(bytes.data());
  stream.avail_in = static_cast<uInt>(bytes.size());
  stream.next_out = out.data();
  stream.avail_out = static_cast<uInt>(out.size());
  const int code = deflate(&stream, Z_FINISH);
  out.resize(stream.total_out);
  deflateEnd(&stream);
  if (code != Z_STREAM_END) throw std::runtime_error("deflate did not finish");
  return out;
}

inline std::vector<uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void put_be32(std::vector<uint8_t>& bytes, uint32_t value) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    bytes.push_back(static_cast<uint8_t>(value >> shift));
  }
}

// IDX image file: magic 2051, count, rows, cols, then pixel (i, y, x) = (i * 31 + y * 7 + x) % 256.
inline std::vector<uint8_t> idx_images(uint32_t count, uint32_t rows, uint32_t cols,
                                       uint32_t magic = 2051) {
  std::vector<uint8_t> bytes;
  for (uint32_t v : {magic, count, rows, cols}) put_be32(bytes, v);
  for (uint32_t i = 0; i < count; ++i) {
    for (uint32_t y = 0; y < rows; ++y) {
      for (uint32_t x = 0; x < cols; ++x) {
        bytes.push_back(static_cast<uint8_t>((i * 31 + y * 7 + x) % 256));
      }
    }
  }
  return bytes;
}

// IDX label file: magic 2049, count, then label i = (i * 3) % 10.
inline std::vector<uint8_t> idx_labels(uint32_t count, uint32_t magic = 2049) {
  std::vector<uint8_t> bytes;
  for (uint32_t v : {magic, count}) put_be32(bytes, v);
  for (uint32_t i = 0; i < count; ++i) bytes.push_back(static_cast<uint8_t>((i * 3) % 10));
  return bytes;
}

// CIFAR-10 records: label (first_label + r) % 10,
// pixel (c, y, x) = (r * 13 + c * 50 + y * 3 + x) % 256.
inline std::vector<uint8_t> cifar_records(int count, int first_label = 0) {
  std::vector<uint8_t> bytes;
  for (int r = 0; r < count; ++r) {
    bytes.push_back(static_cast<uint8_t>((first_label + r) % 10));
    for (int c = 0; c < 3; ++c) {
      for (int y = 0; y < 32; ++y) {
        for (int x = 0; x < 32; ++x) {
          bytes.push_back(static_cast<uint8_t>((r * 13 + c * 50 + y * 3 + x) % 256));
        }
      }
    }
  }
  return bytes;
}

// A minimal 8-bit RGB PNG (filter 0 on every row, zlib-compressed), independent of OpenCV.
inline std::vector<uint8_t> png_rgb(int width, int height, const std::vector<uint8_t>& rgb) {
  std::vector<uint8_t> png = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  auto chunk = [&png](const char* type, const std::vector<uint8_t>& data) {
    put_be32(png, static_cast<uint32_t>(data.size()));
    std::vector<uint8_t> body(type, type + 4);
    body.insert(body.end(), data.begin(), data.end());
    png.insert(png.end(), body.begin(), body.end());
    put_be32(png, static_cast<uint32_t>(crc32(0L, body.data(), static_cast<uInt>(body.size()))));
  };
  std::vector<uint8_t> header;
  put_be32(header, static_cast<uint32_t>(width));
  put_be32(header, static_cast<uint32_t>(height));
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, no filter, no interlace
  chunk("IHDR", header);
  std::vector<uint8_t> raw;
  for (int y = 0; y < height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), rgb.begin() + y * width * 3, rgb.begin() + (y + 1) * width * 3);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> compressed(size);
  compress(compressed.data(), &size, raw.data(), static_cast<uLong>(raw.size()));
  compressed.resize(size);
  chunk("IDAT", compressed);
  chunk("IEND", {});
  return png;
}

inline std::vector<uint8_t> solid_rgb(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  std::vector<uint8_t> rgb;
  for (int i = 0; i < width * height; ++i) rgb.insert(rgb.end(), {r, g, b});
  return rgb;
}

}  // namespace dtrain::data::test
