// decode_region() on damaged JPEGs and PNGs: each is a problem naming the damage, never a
// crash, a partly grey image or a line on stderr; and many decoders on many threads at once.
#include "data/image_decode.h"
#include "data/image_file.h"
#include "fixtures.h"

#include <catch2/catch.hpp>

#ifdef DTRAIN_IMAGE_CODECS

#include "codec_fixtures.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

using dtrain::data::decode_region;
using dtrain::data::DecodedRegion;
using dtrain::data::image_bytes_problem;
using dtrain::data::ImageRegion;
namespace test = dtrain::data::test;
using test::contains;
using Bytes = std::vector<uint8_t>;

namespace {

ImageRegion whole(int height, int width) { return {0, 0, height, width}; }

// The problem of decoding all of `bytes`; "" when it decodes, into a whole image.
std::string problem_of(const Bytes& bytes) {
  DecodedRegion out;
  const std::string problem = decode_region(bytes, whole, out);
  if (problem.empty()) REQUIRE(out.rgb.size() == static_cast<size_t>(out.height) * out.width * 3);
  return problem;
}

size_t find(const Bytes& bytes, const Bytes& part, size_t from = 0) {
  const auto at = std::search(bytes.begin() + static_cast<ptrdiff_t>(from), bytes.end(),
                              part.begin(), part.end());
  REQUIRE(at != bytes.end());
  return static_cast<size_t>(at - bytes.begin());
}

// Where the entropy-coded data of a JPEG's first scan start: after its SOS segment.
size_t jpeg_scan_start(const Bytes& jpeg) {
  const size_t sos = find(jpeg, {0xff, 0xda});
  return sos + 2 + (jpeg[sos + 2] << 8 | jpeg[sos + 3]);
}

Bytes with_end_marker(Bytes bytes) {
  bytes.insert(bytes.end(), {0xff, 0xd9});
  return bytes;
}

// What the process writes on stderr (fd 2) from construction to text(): nothing, expected.
class StderrCapture {
 public:
  StderrCapture() : file_(std::tmpfile()), saved_(dup(2)) {
    std::fflush(stderr);
    dup2(fileno(file_), 2);
  }
  ~StderrCapture() {
    restore();
    std::fclose(file_);
  }
  StderrCapture(const StderrCapture&) = delete;
  StderrCapture& operator=(const StderrCapture&) = delete;

  std::string text() {
    restore();
    std::rewind(file_);
    std::string text;
    for (int c = std::fgetc(file_); c != EOF; c = std::fgetc(file_)) text += static_cast<char>(c);
    return text;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_;
};

// Recomputes the CRC of the PNG chunk whose type starts at `at`, after an edit.
void fix_png_crc(Bytes& png, size_t at) {
  const uint32_t length = static_cast<uint32_t>(png[at - 4]) << 24 | png[at - 3] << 16 |
                          png[at - 2] << 8 | png[at - 1];
  const uint32_t crc = static_cast<uint32_t>(crc32(0L, png.data() + at, 4 + length));
  for (int i = 0; i < 4; ++i) png[at + 4 + length + i] = static_cast<uint8_t>(crc >> (24 - 8 * i));
}

}  // namespace

TEST_CASE("a JPEG cut inside its scan, with an end marker put back, is corrupt", "[image_decode]") {
  const auto fixtures = test::jpeg_fixtures();
  StderrCapture stderr_capture;
  for (const std::string name : {"4:2:0 250x187", "progressive 4:2:0 250x187", "CMYK 37x23"}) {
    INFO(name);
    const Bytes jpeg = test::fixture_named(fixtures, name).bytes;
    const size_t start = jpeg_scan_start(jpeg), end = jpeg.size() - 16;
    for (size_t cut = start + 1; cut < end; cut += (end - start) / 17) {
      INFO("cut after " << cut << " of " << jpeg.size() << " bytes");
      const Bytes damaged = with_end_marker(Bytes(jpeg.begin(), jpeg.begin() + cut));
      REQUIRE(image_bytes_problem(damaged).empty());  // the end-marker check lets it through
      CHECK(contains(problem_of(damaged), "corrupt: Corrupt JPEG data"));
    }
  }
  CHECK(stderr_capture.text().empty());
}

TEST_CASE("garbage or a stray marker in a JPEG's scan is corrupt", "[image_decode]") {
  // The 250x187 Huffman-coded images: JPEG has no checksum, so damage shows only as a code
  // that does not exist or a marker before the data end, and the scan of a small image (a
  // few hundred bits) or an arithmetic-coded one can take random bytes as valid data.
  StderrCapture stderr_capture;
  std::mt19937 random(5);
  for (const test::Fixture& fixture : test::jpeg_fixtures()) {
    if (!contains(fixture.name, "250x187")) continue;
    INFO(fixture.name);
    const size_t start = jpeg_scan_start(fixture.bytes);
    Bytes garbage(fixture.bytes.begin(), fixture.bytes.begin() + static_cast<ptrdiff_t>(start));
    for (int i = 0; i < 3000; ++i) garbage.push_back(static_cast<uint8_t>(random()));
    CHECK(contains(problem_of(with_end_marker(garbage)), "corrupt: "));
    // Entropy-coded data holds FF only as FF 00 or a restart marker: FF C4 (a Huffman table)
    // ends the scan before its data do.
    Bytes marked = fixture.bytes;
    const size_t at = start + (marked.size() - start) / 3;
    marked[at] = 0xff;
    marked[at + 1] = 0xc4;
    CHECK(contains(problem_of(marked), "corrupt: Corrupt JPEG data"));
  }
  CHECK(stderr_capture.text().empty());
}

TEST_CASE("single flipped bytes anywhere neither crash nor print", "[image_decode]") {
  // JPEG has no checksum: a flipped bit inside the entropy-coded data that keeps the Huffman
  // codes valid decodes, to wrong pixels, in every decoder. Only the absence of harm is checked.
  std::vector<test::Fixture> fixtures = test::jpeg_fixtures();
  for (test::Fixture& png : test::png_fixtures()) fixtures.push_back(std::move(png));
  StderrCapture stderr_capture;
  std::mt19937 random(9);
  int problems = 0, decoded = 0;
  for (const test::Fixture& fixture : fixtures) {
    for (int trial = 0; trial < 40; ++trial) {
      Bytes damaged = fixture.bytes;
      damaged[random() % damaged.size()] ^= static_cast<uint8_t>(1 + random() % 255);
      (problem_of(damaged).empty() ? decoded : problems) += 1;
    }
  }
  CHECK(stderr_capture.text().empty());
  CHECK(problems > 0);
  CHECK(decoded > 0);
}

TEST_CASE("a JPEG header of no pixels or of too many is a problem", "[image_decode]") {
  const Bytes jpeg = test::fixture_named(test::jpeg_fixtures(), "4:2:0 250x187").bytes;
  const size_t sof = find(jpeg, {0xff, 0xc0});  // FF C0, length, precision, height, width
  auto with_size = [&](int height, int width) {
    Bytes sized = jpeg;
    sized[sof + 5] = static_cast<uint8_t>(height >> 8);
    sized[sof + 6] = static_cast<uint8_t>(height);
    sized[sof + 7] = static_cast<uint8_t>(width >> 8);
    sized[sof + 8] = static_cast<uint8_t>(width);
    return sized;
  };
  StderrCapture stderr_capture;
  CHECK(contains(problem_of(with_size(0, 250)), "corrupt: "));
  CHECK(contains(problem_of(with_size(187, 0)), "corrupt: "));
  CHECK(contains(problem_of(with_size(20000, 20000)), "too large: 20000x20000 pixels"));
  CHECK(contains(problem_of(with_size(16384, 16384)), "corrupt: "));  // allowed; data too short
  CHECK(stderr_capture.text().empty());
}

TEST_CASE("a PNG with a broken CRC, broken deflate data or too many pixels is a problem",
          "[image_decode]") {
  const Bytes png = test::fixture_named(test::png_fixtures(), "RGB 8-bit").bytes;
  const size_t ihdr = find(png, {'I', 'H', 'D', 'R'}), idat = find(png, {'I', 'D', 'A', 'T'});
  StderrCapture stderr_capture;
  const size_t iend = find(png, {'I', 'E', 'N', 'D'});
  Bytes bad_crc = png;  // the CRC of the image's one IDAT chunk, the 4 bytes before IEND's length
  bad_crc[iend - 5] ^= 0x10;
  CHECK(contains(problem_of(bad_crc), "corrupt: IDAT: CRC error"));
  // libpng inflates the data as they come: the deflate stream's damage shows first.
  Bytes bad_data = png;
  bad_data[idat + 6] ^= 0x10;
  CHECK(contains(problem_of(bad_data), "corrupt: IDAT: "));
  fix_png_crc(bad_data, idat);
  CHECK(contains(problem_of(bad_data), "corrupt: IDAT: "));
  Bytes short_data = png;  // the IDAT chunk's deflate stream ends after 20 bytes
  short_data.erase(short_data.begin() + static_cast<ptrdiff_t>(idat + 4 + 20),
                   short_data.begin() + static_cast<ptrdiff_t>(iend - 8));
  short_data[idat - 4] = short_data[idat - 3] = short_data[idat - 2] = 0;
  short_data[idat - 1] = 20;
  fix_png_crc(short_data, idat);
  CHECK(contains(problem_of(short_data), "corrupt: "));
  Bytes huge = png;
  for (size_t at : {ihdr + 4, ihdr + 8}) {  // width, height: 20000
    huge[at + 2] = 20000 >> 8;
    huge[at + 3] = 20000 & 255;
  }
  fix_png_crc(huge, ihdr);
  CHECK(contains(problem_of(huge), "too large: 20000x20000 pixels"));
  CHECK(stderr_capture.text().empty());
}

TEST_CASE("image_bytes_problem's problems come first", "[image_decode]") {
  const Bytes jpeg = test::fixture_named(test::jpeg_fixtures(), "4:2:0 37x23").bytes;
  bool chose = false;
  DecodedRegion out;
  auto choose = [&chose](int height, int width) {
    chose = true;
    return whole(height, width);
  };
  CHECK(contains(decode_region(Bytes(jpeg.begin(), jpeg.end() - 2), choose, out),
                 "truncated: no JPEG end-of-image marker"));
  CHECK(contains(decode_region(Bytes{'G', 'I', 'F', '8', '9', 'a'}, choose, out),
                 "not a JPEG or PNG"));
  CHECK(contains(decode_region(Bytes{}, choose, out), "empty file"));
  CHECK_FALSE(chose);
}

TEST_CASE("decoders on many threads at once give each its own pixels", "[image_decode]") {
  std::vector<test::Fixture> fixtures = test::jpeg_fixtures();
  for (test::Fixture& png : test::png_fixtures()) fixtures.push_back(std::move(png));
  std::vector<Bytes> expected;
  for (const test::Fixture& fixture : fixtures) {
    DecodedRegion out;
    REQUIRE(decode_region(fixture.bytes, whole, out).empty());
    expected.push_back(out.rgb);
  }
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 5; ++round) {
        for (size_t f = (t * 7) % fixtures.size(), n = 0; n < fixtures.size();
             ++n, f = (f + 1) % fixtures.size()) {
          DecodedRegion out;
          if (!decode_region(fixtures[f].bytes, whole, out).empty() || out.rgb != expected[f]) {
            ++mismatches[t];
          }
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(mismatches == std::vector<int>(kThreads, 0));
}

#endif  // DTRAIN_IMAGE_CODECS
