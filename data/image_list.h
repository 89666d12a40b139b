// The files of an image folder (torchvision ImageFolder layout: root/<class>/**/<file>), listed
// once when the dataset is opened, and the data.skip_bad_images filter over them.
//
// When files are checked (the choice, and why):
//   - data.skip_bad_images = false (the default): nothing is read when the folder is opened,
//     so a folder of a million images opens in the time it takes to list it. Every get()
//     checks the file it reads (signature and end marker, image_file.h) before decoding it, at
//     no extra I/O, and a damaged file is a UserError naming it.
//   - data.skip_bad_images = true: drop_unreadable() runs the cheap check (two small reads
//     per file, not a decode) on every file when the folder is opened, and leaves out the
//     files that fail it. The sample order is a function of the seed over the files that
//     remain, so it never changes during the run. A file that passes the check and still
//     fails to decode later (corruption inside its data) is then an error naming the file:
//     skipping it at that point would change the order.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace dtrain::data {

// Every image file, as one string of relative names (compact for a million files).
struct FileList {
  std::vector<std::string> class_dirs;  // [classes]: root/<class>
  std::string names;                    // relative paths, concatenated
  std::vector<size_t> offsets;          // [n + 1]: file i is names[offsets[i], offsets[i + 1])
  std::vector<int32_t> labels;          // [n]

  size_t size() const { return labels.size(); }
  std::string path(size_t i) const;
};

// Sorted names of the sub-folders of `root`. Throws UserError when `root` does not exist, is
// not a folder, or holds no sub-folder.
std::vector<std::string> class_names(const std::filesystem::path& root);

// The .jpg, .jpeg and .png files (any case) below each class folder, sorted by relative path
// within a class; label = the class's index in `classes`. Throws UserError naming a class
// folder without images.
FileList list_files(const std::filesystem::path& root, const std::vector<std::string>& classes);

struct Unreadable {
  int64_t count = 0;
  std::string first;  // "path: problem" of the first file left out, in list order
};

// Leaves out of `files` those that fail image_file_problem(), keeping the order of the rest.
// Checks with up to 16 threads; the result does not depend on their number.
Unreadable drop_unreadable(FileList& files);

}  // namespace dtrain::data
