// One JPEG or PNG file: a cheap completeness check (signature and end marker) and reading it.
// The check exists because decoders let damage through: libjpeg decodes a truncated JPEG into
// a partly grey image with only a warning, and with skip_bad_images the check runs on every
// file of a folder when it opens, which a decode could not afford. Decoding: image_decode.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>


namespace dtrain::data {

// How many bytes at the end of a file may follow its end marker (padding, a short trailer)
// and still count as complete; also how much of the tail image_file_problem() reads.
constexpr size_t kImageTailBytes = 4096;

// What is wrong with an image file given its first bytes `head` (at least 8 when the file
// has them) and its last min(size, kImageTailBytes) bytes `tail`: "" when it starts with a
// JPEG or PNG signature and ends with that format's end marker, else one phrase ("truncated:
// no JPEG end-of-image marker (FF D9) in its last 4096 bytes", "not a JPEG or PNG: ...").
//   JPEG: FF D8 FF ... FF D9. Entropy-coded data never holds FF D9 (a data byte FF is
//     followed by 00 or a restart marker D0-D7), so a file cut inside a scan has no FF D9 in
//     its tail; a start-of-scan marker (FF DA) after the last FF D9 means the FF D9 was an
//     embedded thumbnail's, and the main image is cut.
//   PNG: the 8-byte signature ... the empty IEND chunk 00 00 00 00 'IEND' AE 42 60 82.
// Corruption inside the data (flipped bits) passes; the decoder reports what it can of that.
std::string image_ends_problem(const std::vector<uint8_t>& head, const std::vector<uint8_t>& tail);

// The same check on a whole file in memory.
std::string image_bytes_problem(const std::vector<uint8_t>& bytes);

// The same check reading only the head and tail of the file at `path` (two small reads:
// cheap enough to run on every file of a large folder when it is opened). A file that cannot
// be read is a problem too ("cannot read: Permission denied").
std::string image_file_problem(const std::string& path);

// The whole file at `path` into `bytes`; returns the problem ("cannot open: ...") or "".
std::string read_image_file(const std::string& path, std::vector<uint8_t>& bytes);

}  // namespace dtrain::data
