#include "data/image_list.h"

#include "common/error.h"
#include "data/image_file.h"
#include "data/readers.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <thread>

namespace dtrain::data {

namespace fs = std::filesystem;

namespace {

bool is_image_file(const fs::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

// The checks are two small reads per file, so the time goes to file-system latency: a few
// threads hide it (a network file system most of all) without competing with training.
unsigned scan_threads(size_t files) {
  const unsigned cores = std::max(1U, std::thread::hardware_concurrency());
  return static_cast<unsigned>(std::min<size_t>({cores, 16, std::max<size_t>(files, 1)}));
}

}  // namespace

std::string FileList::path(size_t i) const {
  return class_dirs[static_cast<size_t>(labels[i])] + "/" +
         names.substr(offsets[i], offsets[i + 1] - offsets[i]);
}

std::vector<std::string> class_names(const fs::path& root) {
  const std::string problem = folder_problem(root.string());
  if (!problem.empty()) {
    throw UserError(fmt::format("{}: {}; image_folder expects data.path/train and "
                                "data.path/val, one sub-folder per class",
                                root.string(), problem));
  }
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(root)) {
    if (entry.is_directory()) names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  if (names.empty()) {
    throw UserError(fmt::format("{}: no class sub-folders; put each class's images in a "
                                "folder of its own",
                                root.string()));
  }
  return names;
}

FileList list_files(const fs::path& root, const std::vector<std::string>& classes) {
  FileList files;
  files.offsets.push_back(0);
  for (size_t label = 0; label < classes.size(); ++label) {
    const fs::path dir = root / classes[label];
    std::vector<std::string> names;
    for (const fs::directory_entry& entry : fs::recursive_directory_iterator(
             dir, fs::directory_options::follow_directory_symlink)) {
      if (entry.is_regular_file() && is_image_file(entry.path())) {
        names.push_back(entry.path().lexically_relative(dir).string());
      }
    }
    if (names.empty()) {
      throw UserError(fmt::format("{}: no .jpg, .jpeg or .png files; add images or remove "
                                  "the class folder",
                                  dir.string()));
    }
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      files.names += name;
      files.offsets.push_back(files.names.size());
      files.labels.push_back(static_cast<int32_t>(label));
    }
    files.class_dirs.push_back(dir.string());
  }
  return files;
}

Unreadable drop_unreadable(FileList& files) {
  // problems[i]: why file i fails the check, "" if it passes. Threads take interleaved
  // indices and write disjoint entries.
  std::vector<std::string> problems(files.size());
  std::vector<std::thread> threads;
  const unsigned count = scan_threads(files.size());
  for (unsigned t = 0; t < count; ++t) {
    threads.emplace_back([&files, &problems, t, count] {
      for (size_t i = t; i < files.size(); i += count) {
        problems[i] = image_file_problem(files.path(i));
      }
    });
  }
  for (std::thread& thread : threads) thread.join();

  Unreadable dropped;
  FileList kept;
  kept.class_dirs = files.class_dirs;
  kept.offsets.push_back(0);
  for (size_t i = 0; i < files.size(); ++i) {
    if (!problems[i].empty()) {
      if (dropped.count++ == 0) dropped.first = files.path(i) + ": " + problems[i];
      continue;
    }
    kept.names.append(files.names, files.offsets[i], files.offsets[i + 1] - files.offsets[i]);
    kept.offsets.push_back(kept.names.size());
    kept.labels.push_back(files.labels[i]);
  }
  files = std::move(kept);
  return dropped;
}

}  // namespace dtrain::data
