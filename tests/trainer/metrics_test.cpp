// metrics.jsonl and its long-form twin metrics.csv: the same records, and a resume drops the
// replayed steps from both.
#include "common/files.h"
#include "trainer/metrics.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using dtrain::trainer::MetricsWriter;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("metrics.csv holds every figure of metrics.jsonl, one row each", "[metrics]") {
  const fs::path dir = fs::temp_directory_path() / "dtrain_metrics_test";
  dtrain::remove_tree(dir);
  fs::create_directories(dir);
  const std::string path = (dir / "metrics.jsonl").string();
  {
    MetricsWriter writer(path);
    writer.write("step", 10, {{"loss/train", 0.5}, {"lr", 0.125}});
    writer.write("step", 20, {{"loss/train", 0.25}, {"lr", 0.0625}});
    writer.write("final", 20, {{"accuracy/test", 0.75}});
  }
  CHECK(read(dir / "metrics.csv") ==
        "kind,step,key,value\n"
        "step,10,loss/train,0.5\nstep,10,lr,0.125\n"
        "step,20,loss/train,0.25\nstep,20,lr,0.0625\n"
        "final,20,accuracy/test,0.75\n");
  {
    // Resumed at step 10: step 20 and the final record go, from both files; then it goes on.
    MetricsWriter writer(path);
    writer.resume_at(10);
    writer.write("step", 20, {{"loss/train", 0.3}});
  }
  CHECK(read(dir / "metrics.csv") ==
        "kind,step,key,value\n"
        "step,10,loss/train,0.5\nstep,10,lr,0.125\n"
        "step,20,loss/train,0.3\n");
  std::ifstream jsonl(path);
  int lines = 0;
  for (std::string line; std::getline(jsonl, line);) ++lines;
  CHECK(lines == 2);
  dtrain::remove_tree(dir);
}
