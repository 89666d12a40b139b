// ZeRO checkpoints by partition (dist/optimizer_state.h, dist/zero/shard_checkpoint.h): each
// rank writes its own optimizer state without communicating, its file holds its slice only, a
// reader opens only the files that hold its parameters, and a damaged file is named.
#include "common/error.h"
#include "dist/ddp/ddp.h"
#include "dist/optimizer_state.h"
#include "dist/zero/shard_checkpoint.h"
#include "dist/zero/zero.h"
#include "dist/zero/zero2.h"
#include "dist/zero/zero3.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <set>

using dtrain::dist::ParamSlice;
using Catch::Matchers::Contains;
using namespace equivalence;

namespace {

enum class Kind { kZero1, kZero2, kZero3 };

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::kZero1: return "zero stage 1";
    case Kind::kZero2: return "zero stage 2";
    case Kind::kZero3: return "zero stage 3";
  }
  return "";
}

std::unique_ptr<dtrain::dist::Strategy> make_zero(Kind kind) {
  dtrain::dist::ZeroOptions zero;
  switch (kind) {
    case Kind::kZero1: return std::make_unique<dtrain::dist::ZeroStrategy>(world());
    case Kind::kZero2: zero.stage = 2; return std::make_unique<dtrain::dist::Zero2Strategy>(zero, world());
    case Kind::kZero3: zero.stage = 3; break;
  }
  return std::make_unique<dtrain::dist::Zero3Strategy>(zero, world());
}

// The trainable parameters `strategy` (attached) updates on this rank, by index.
std::set<int64_t> touched(Kind kind, dtrain::dist::Strategy& strategy) {
  const int rank = world()->rank();
  std::set<int64_t> params;
  if (kind == Kind::kZero1) {
    const auto& first = dynamic_cast<dtrain::dist::ZeroStrategy&>(strategy).partition().first;
    for (int64_t i = first[rank]; i < first[rank + 1]; ++i) params.insert(i);
    return params;
  }
  const dtrain::dist::PsPlan& plan =
      kind == Kind::kZero2 ? dynamic_cast<dtrain::dist::Zero2Strategy&>(strategy).plan()
                           : dynamic_cast<dtrain::dist::Zero3Strategy&>(strategy).plan();
  for (const ParamSlice& slice : dtrain::dist::rank_slices(plan, rank)) params.insert(slice.param);
  return params;
}

std::vector<ParamSlice> slices_in(const torch::Tensor& rows) {
  std::vector<ParamSlice> slices;
  for (int64_t i = 0; i < rows.size(0); ++i) {
    slices.push_back({rows[i][0].item<int64_t>(), rows[i][1].item<int64_t>(),
                      rows[i][2].item<int64_t>()});
  }
  return slices;
}

// Per writer's file in checkpoint `dir` (either ZeRO layout), the parameters it holds state of.
std::vector<std::pair<std::string, std::set<int64_t>>> files_of(const std::string& dir) {
  std::vector<std::pair<std::string, std::set<int64_t>>> files;
  if (std::filesystem::exists(dtrain::dist::zero_partition_file(dir))) {
    torch::Tensor first;
    torch::load(first, dtrain::dist::zero_partition_file(dir));
    for (int64_t r = 0; r + 1 < first.numel(); ++r) {
      std::set<int64_t> params;
      for (int64_t i = first[r].item<int64_t>(); i < first[r + 1].item<int64_t>(); ++i) {
        params.insert(i);
      }
      files.emplace_back(dtrain::dist::zero_state_file(dir, static_cast<int>(r)), params);
    }
    return files;
  }
  torch::serialize::InputArchive index;
  index.load_from(dtrain::dist::slice_index_file(dir));
  torch::Tensor ranks;
  index.read("ranks", ranks);
  for (int64_t r = 0; r < ranks.item<int64_t>(); ++r) {
    torch::Tensor rows;
    index.read("rank" + std::to_string(r), rows);
    std::set<int64_t> params;
    for (const ParamSlice& slice : slices_in(rows)) params.insert(slice.param);
    files.emplace_back(dtrain::dist::slice_state_file(dir, static_cast<int>(r)), params);
  }
  return files;
}

// Train two steps under `kind` on every rank and write the checkpoint into `dir`.
Net write_two_steps(Kind kind, const Data& data, const std::string& dir) {
  const auto options = optimizer_options("adamw");
  Net net = make_net();
  auto before = make_zero(kind);
  before->attach(*net, factory(options));
  train(net, *before, data, 0, 2, options.lr);
  Net trained = net_from(before->model_state());
  save_checkpoint(*before, dir);
  return trained;
}

}  // namespace

TEST_CASE("Each ZeRO rank writes its own partition, communicating with no one",
          "[dist][zero]") {
  const Kind kind = GENERATE(Kind::kZero1, Kind::kZero2, Kind::kZero3);
  INFO(name_of(kind));
  const auto options = optimizer_options("adamw");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  const std::string dir = fresh_directory("zero_partition_test");
  Net net = make_net();
  auto before = make_zero(kind);
  before->attach(*net, factory(options));
  train(net, *before, data, 0, 2, options.lr);
  Net trained = net_from(before->model_state());
  world()->barrier();  // the directory exists
  // One rank after another: a collective in prepare_checkpoint() or save_partition() (a gather
  // of optimizer state) would never complete.
  for (int writer = 0; writer < world()->size(); ++writer) {
    if (world()->rank() == writer) {
      before->prepare_checkpoint();
      before->save_partition(dir);
    }
    world()->barrier();
  }
  // This rank's file holds its slice and no other.
  const int rank = world()->rank();
  if (kind == Kind::kZero1) {
    const auto& first = dynamic_cast<dtrain::dist::ZeroStrategy&>(*before).partition().first;
    const std::vector<torch::Tensor> all = net->parameters();
    const std::vector<torch::Tensor> own(all.begin() + first[rank], all.begin() + first[rank + 1]);
    auto loaded = factory(options)(own);
    torch::serialize::InputArchive archive;
    archive.load_from(dtrain::dist::zero_state_file(dir, rank));
    loaded->load(archive);
    CHECK(loaded->state().size() == own.size());
  } else {
    const dtrain::dist::PsPlan& plan =
        kind == Kind::kZero2 ? dynamic_cast<dtrain::dist::Zero2Strategy&>(*before).plan()
                             : dynamic_cast<dtrain::dist::Zero3Strategy&>(*before).plan();
    torch::serialize::InputArchive archive;
    archive.load_from(dtrain::dist::slice_state_file(dir, rank));
    torch::Tensor rows;
    archive.read("slices", rows);
    CHECK((slices_in(rows) == dtrain::dist::rank_slices(plan, rank)));
  }
  CHECK_FALSE(std::filesystem::exists(dir + "/optimizer.pt"));
  if (rank == 0) before->save(dir);
  world()->barrier();

  // Resumed on the same ranks, the run goes on as the straight one.
  auto after = make_zero(kind);
  after->attach(*trained, factory(options));
  after->load(dir);
  train(trained, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(after->model_state(), *reference) < kTolerance);
}

TEST_CASE("A ZeRO rank reads only the partition files that hold its parameters",
          "[dist][zero]") {
  // Each rank resumes from a private copy of the checkpoint that holds only the files its new
  // partition overlaps: a read of any other would fail as a missing file.
  const auto [first_kind, second_kind] = GENERATE(table<Kind, Kind>(
      {{Kind::kZero2, Kind::kZero1}, {Kind::kZero1, Kind::kZero3}, {Kind::kZero3, Kind::kZero2},
       {Kind::kZero3, Kind::kZero3}}));
  INFO(name_of(first_kind) << ", then " << name_of(second_kind));
  const auto options = optimizer_options("adamw");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  const std::string dir = fresh_directory("zero_overlap_test");
  Net trained = write_two_steps(first_kind, data, dir);

  auto after = make_zero(second_kind);
  after->attach(*trained, factory(options));
  const std::set<int64_t> mine = touched(second_kind, *after);
  const std::string own = dir + "_rank" + std::to_string(world()->rank());
  dtrain::remove_tree(own);
  std::filesystem::create_directories(own);
  for (const char* index : {"/zero_partition.pt", "/optimizer_slices.pt"}) {
    if (std::filesystem::exists(dir + index)) std::filesystem::copy_file(dir + index, own + index);
  }
  for (const auto& [file, params] : files_of(dir)) {
    const bool needed = std::any_of(params.begin(), params.end(),
                                    [&](int64_t param) { return mine.count(param) > 0; });
    if (!needed) continue;
    std::filesystem::copy_file(file, own + "/" + std::filesystem::path(file).filename().string());
  }
  after->load(own);
  train(trained, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(after->model_state(), *reference) < kTolerance);
}

TEST_CASE("A damaged, missing or foreign ZeRO partition file is named in one line",
          "[dist][zero]") {
  const Kind kind = GENERATE(Kind::kZero1, Kind::kZero2);
  INFO(name_of(kind));
  const Data data = make_data(world()->size());
  const std::string dir = fresh_directory("zero_damaged_test");
  Net trained = write_two_steps(kind, data, dir);
  const int last = world()->size() - 1;
  const std::string file = kind == Kind::kZero1 ? dtrain::dist::zero_state_file(dir, last)
                                                : dtrain::dist::slice_state_file(dir, last);
  const auto load_all = [&] {  // DDP reads every file
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    Net net = copy_of(trained);
    ddp.attach(*net, factory(optimizer_options("adamw")));
    world()->barrier();  // every rank is past attach()'s collectives before one throws
    ddp.load(dir);
  };
  if (kind == Kind::kZero2 && last > 0) {  // rank 1's file under rank 0's name
    const std::string first = dtrain::dist::slice_state_file(dir, 0), kept = dir + "/kept";
    if (world()->rank() == 0) {
      std::filesystem::copy_file(first, kept);
      std::filesystem::copy_file(dtrain::dist::slice_state_file(dir, 1), first,
                                 std::filesystem::copy_options::overwrite_existing);
    }
    world()->barrier();
    CHECK_THROWS_WITH(load_all(), Contains(first) && Contains("mixes files of two checkpoints"));
    world()->barrier();
    if (world()->rank() == 0) {
      std::filesystem::copy_file(kept, first, std::filesystem::copy_options::overwrite_existing);
    }
  }
  world()->barrier();
  if (world()->rank() == 0) std::filesystem::resize_file(file, 40);
  world()->barrier();
  CHECK_THROWS_WITH(load_all(), Contains(file) && Contains("damaged, does not load"));
  world()->barrier();
  if (world()->rank() == 0) std::filesystem::remove(file);
  world()->barrier();
  CHECK_THROWS_WITH(load_all(), Contains(file) && Contains("missing"));
  world()->barrier();  // every rank has read before the next section's directory replaces it
}
