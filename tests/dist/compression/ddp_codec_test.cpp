// DDP under dist.compression, float64 on N ranks: the codecs' wiring into the strategy (the
// casts stay within their precision of one rank on the whole batch, the stats report the
// bytes saved), and the codec state in checkpoints: resumed on the same ranks, training
// continues as if never stopped; resumed on another number of ranks, the residuals restart
// from zero and the shared state stays; a damaged file is an error naming it.
#include "common/error.h"
#include "dist/compression/codec_file.h"
#include "dist/ddp/ddp.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <fstream>

using namespace dtrain::dist;
using namespace equivalence;
using Catch::Matchers::Contains;

namespace {

struct Trained {
  Net net;
  std::unique_ptr<DdpStrategy> strategy;  // destroyed first: its hooks point into it
};

Trained start(const CompressionOptions& compression, Net net) {
  auto strategy = std::make_unique<DdpStrategy>(DdpOptions(), world(), compression);
  strategy->attach(*net, factory(optimizer_options("sgd")));
  return {net, std::move(strategy)};
}

}  // namespace

TEST_CASE("DDP with fp16 or bf16 gradients stays close to one rank", "[codec]") {
  CompressionOptions compression;
  compression.kind = GENERATE("fp16", "bf16");
  INFO("codec " << compression.kind);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, optimizer_options("sgd"));
  Trained run = start(compression, make_net(static_cast<uint64_t>(world()->rank())));
  train(run.net, *run.strategy, data, 0, kSteps, optimizer_options("sgd").lr);
  CHECK(max_difference(*run.net, *reference) < (compression.kind == "fp16" ? 1e-4 : 1e-3));
  // float64 buckets sent as 2-byte elements.
  CHECK(stat(run.strategy->stats(), "comm/compression_ratio") == 4.0);
  CHECK(stat(run.strategy->stats(), "memory/codec_state_mb") == 0.0);  // no residuals
}

TEST_CASE("codec state resumes exactly on the same ranks", "[codec]") {
  CompressionOptions compression;
  compression.kind = GENERATE("topk", "powersgd", "onebit");
  compression.ratio = 0.2;
  compression.rank = 2;
  // One chunk for the whole model: a resumed run's first step has the first-guess bucket
  // order (re-planned after it), and smaller chunks would cut it elsewhere.
  compression.chunk = 1024;
  compression.momentum = compression.kind == "topk" ? 0.5 : 0.0;
  INFO("codec " << compression.kind);
  const Data data = make_data(world()->size());
  const double lr = optimizer_options("sgd").lr;
  Trained straight = start(compression, make_net());
  train(straight.net, *straight.strategy, data, 0, kSteps, lr);

  Trained first = start(compression, make_net());
  train(first.net, *first.strategy, data, 0, kSteps / 2, lr);
  CHECK(stat(first.strategy->stats(), "comm/residual_norm") > 0);
  // At least a float64 residual per gradient element.
  int64_t elements = 0;
  for (const torch::Tensor& param : first.net->parameters()) elements += param.numel();
  CHECK(stat(first.strategy->stats(), "memory/codec_state_mb") * (1 << 20) >= elements * 8.0);
  const std::string dir = fresh_directory("codec_resume_" + compression.kind);
  save_checkpoint(*first.strategy, dir);
  Trained resumed = start(compression, copy_of(first.net));
  resumed.strategy->load(dir);
  train(resumed.net, *resumed.strategy, data, kSteps / 2, kSteps, lr);
  CHECK(max_difference(*resumed.net, *straight.net) < kTolerance);
}

TEST_CASE("codec state on another number of ranks keeps what still holds", "[codec]") {
  CompressionOptions compression;
  compression.kind = "powersgd";
  compression.rank = 2;
  Trained run = start(compression, make_net());
  train(run.net, *run.strategy, make_data(world()->size()), 0, 2, 0.1);
  const std::string dir = fresh_directory("codec_other_world");
  save_checkpoint(*run.strategy, dir);
  auto codec = compression::make_codec(compression, world(), run.net->parameters());
  const int64_t num_params = static_cast<int64_t>(run.net->parameters().size());
  compression::load_codec_state(dir, *codec, num_params, world()->rank(), world()->size() + 1,
                                device());
  const compression::CodecState state = codec->state();
  CHECK(state.slots.at(0).empty());  // residuals restart from zero
  CHECK(!state.shared.empty());      // PowerSGD's Q is the same on every rank: kept
}

TEST_CASE("a damaged codec file is an error naming it", "[codec]") {
  CompressionOptions compression;
  compression.kind = "onebit";
  Trained run = start(compression, make_net());
  train(run.net, *run.strategy, make_data(world()->size()), 0, 1, 0.1);
  const std::string dir = fresh_directory("codec_damaged");
  save_checkpoint(*run.strategy, dir);
  const std::string file = compression::codec_state_file(dir, world()->size() - 1);
  if (world()->rank() == 0) std::ofstream(file, std::ios::binary | std::ios::trunc) << "junk";
  world()->barrier();
  if (world()->rank() == world()->size() - 1) {
    CHECK_THROWS_WITH(run.strategy->load(dir), Contains(file) && Contains("damaged"));
  } else {
    CHECK_NOTHROW(run.strategy->load(dir));
  }
}
