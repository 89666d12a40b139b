#include "common/files.h"

#include <catch2/catch.hpp>
#include <sys/resource.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "common/error.h"

namespace fs = std::filesystem;
using Catch::Contains;

namespace {

// Makes writes past `bytes` fail (EFBIG) for the scope, as a full disk would (ENOSPC): the
// process's file-size limit, with SIGXFSZ ignored so the write returns the error.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) : old_signal_(std::signal(SIGXFSZ, SIG_IGN)) {
    getrlimit(RLIMIT_FSIZE, &old_);
    rlimit limited = old_;
    limited.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_signal_);
  }

 private:
  rlimit old_{};
  void (*old_signal_)(int);
};

fs::path scratch(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "dtrain_files_test";
  fs::create_directories(dir);
  return dir / name;
}

}  // namespace

TEST_CASE("write_whole_file writes the bytes, and a failed write leaves no file", "[files]") {
  const fs::path path = scratch("whole.bin");
  dtrain::write_whole_file(path, "abc");
  CHECK(fs::file_size(path) == 3);

  const std::string big(1 << 20, 'x');
  {
    FileSizeLimit limit(4096);
    CHECK_THROWS_WITH(dtrain::write_whole_file(path, big),
                      Contains(path.string() + ": cannot write: File too large"));
  }
  CHECK_FALSE(fs::exists(path));
  CHECK_THROWS_WITH(dtrain::write_whole_file(scratch("no/such/dir/file"), "x"),
                    Contains("cannot create: No such file or directory"));
}

TEST_CASE("save_archive reports a failed write as one error and leaves no file", "[files]") {
  const fs::path path = scratch("archive.pt");
  torch::serialize::OutputArchive archive;
  archive.write("weights", torch::ones({1 << 18}));
  dtrain::save_archive(archive, path.string());
  torch::serialize::InputArchive loaded;
  loaded.load_from(path.string());
  torch::Tensor weights;
  loaded.read("weights", weights);
  CHECK(weights.sum().item<double>() == (1 << 18));

  {
    // torch's own file writer ends the process here (it throws from a destructor).
    FileSizeLimit limit(64 * 1024);
    CHECK_THROWS_AS(dtrain::save_archive(archive, path.string()), dtrain::UserError);
  }
  CHECK_FALSE(fs::exists(path));
}
