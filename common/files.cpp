#include "common/files.h"

#include <system_error>
#include <vector>

namespace dtrain {

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

}  // namespace dtrain
