#include "source_dir.h"
#include "trainer/config.h"

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace fs = std::filesystem;
using dtrain::trainer::Config;
using dtrain::trainer::ConfigError;
using dtrain::trainer::load_config;

namespace {

std::string write_config(const std::string& name, const std::string& text) {
  const fs::path dir = fs::temp_directory_path() / "dtrain_config_test";
  fs::create_directories(dir);
  const fs::path path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

std::vector<std::string> problems_of(const std::string& path,
                                     const std::vector<std::string>& overrides = {}) {
  try {
    load_config(path, overrides);
  } catch (const ConfigError& e) {
    return e.problems();
  }
  return {};
}

// The warnings of a config that loads (a config with problems throws ConfigError).
std::vector<std::string> warnings_of(const std::string& path,
                                     const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> warnings;
  load_config(path, overrides, warnings);
  return warnings;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("defaults load without a file", "[config]") {
  const Config config = load_config("", {});
  CHECK(config.model.name == "simple_cnn");
  CHECK(config.data.dataset == "fashion_mnist");
  CHECK(config.train.epochs == 10);
}

TEST_CASE("a valid file fills every kind of field", "[config]") {
  const std::string path = write_config("valid.toml", R"(
[run]
seed = 7
[train]
channels_last = true
[optim]
lr = 1
weight_decay = 1e-4
[schedule]
milestones = [2, 4]
[model]
name = "resnet18"
)");
  const Config config = load_config(path, {});
  CHECK(config.run.seed == 7);
  CHECK(config.train.channels_last);
  CHECK(config.optim.lr == 1.0);  // an integer where a float is expected is accepted
  CHECK(config.optim.weight_decay == 1e-4);
  CHECK(config.schedule.milestones == std::vector<int64_t>{2, 4});
  CHECK(config.model.name == "resnet18");
}

TEST_CASE("every problem is reported in one pass as file:line: key: problem", "[config]") {
  const std::string path = write_config("bad.toml", R"([optim]
lrr = 0.1
momentum = "high"
[trian]
epochs = 3
)");
  const std::vector<std::string> problems = problems_of(path);
  REQUIRE(problems.size() == 3);
  CHECK(problems[0] == path + ":2: optim.lrr: unknown key (did you mean optim.lr?)");
  CHECK(problems[1] == path + ":3: optim.momentum: expected a number, got a string");
  CHECK(contains(problems[2], path + ":4: trian: unknown section (did you mean train?)"));
}

TEST_CASE("out-of-range values name the key, the line and the allowed range", "[config]") {
  const std::string path = write_config("range.toml", R"([data]
batch_size = 0
[model]
name = "resnet51"
[train]
precision = "fp8"
label_smoothing = 1.0
)");
  const std::vector<std::string> problems = problems_of(path);
  REQUIRE(problems.size() == 4);
  CHECK(problems[0] == path + ":2: data.batch_size: 0 is outside [1, 1048576]");
  CHECK(contains(problems[1], path + ":4: model.name: \"resnet51\" is not one of"));
  CHECK(contains(problems[1], "(did you mean resnet50?)"));
  CHECK(problems[2] == path + ":6: train.precision: \"fp8\" is not one of: fp32, bf16, fp16 "
                              "(did you mean fp32?)");
  CHECK(problems[3] == path + ":7: train.label_smoothing: 1 is outside [0, 0.99]");
}

TEST_CASE("unknown keys, wrong types and bad values are reported together, in file order",
          "[config]") {
  const std::string path = write_config("mixed.toml", R"([optim]
lrr = 0.1
lr = -1
[data]
batch_size = "many"
eval_batch_size = 0
[dist]
strategy = "dpp"
)");
  const std::vector<std::string> problems = problems_of(path, {"dist.timeout_s=0"});
  REQUIRE(problems.size() == 6);
  CHECK(problems[0] == path + ":2: optim.lrr: unknown key (did you mean optim.lr?)");
  CHECK(problems[1] == path + ":3: optim.lr: -1 is outside [0, 1000]");
  CHECK(problems[2] == path + ":5: data.batch_size: expected an integer, got a string");
  CHECK(problems[3] == path + ":6: data.eval_batch_size: 0 is outside [1, 1048576]");
  CHECK(problems[4] == path + ":8: dist.strategy: \"dpp\" is not one of: single, ddp, zero, ps "
                              "(did you mean ddp?)");
  CHECK(problems[5] == "--set dist.timeout_s: 0 is outside [1, 86400]");
}

TEST_CASE("NaN and infinities are rejected wherever a float has a range", "[config]") {
  CHECK(problems_of("", {"dist.ddp.bucket_mb=nan"}) ==
        std::vector<std::string>{"--set dist.ddp.bucket_mb: nan is not a finite number; use a "
                                 "value in [1e-06, 4096]"});
  CHECK(problems_of("", {"optim.weight_decay=inf"}) ==
        std::vector<std::string>{"--set optim.weight_decay: inf is not a finite number; use a "
                                 "value >= 0"});
  CHECK(problems_of("", {"train.label_smoothing=-inf"}) ==
        std::vector<std::string>{"--set train.label_smoothing: -inf is not a finite number; "
                                 "use a value in [0, 0.99]"});
}

TEST_CASE("debug.slow_factor is finite and at least 1; debug.slow_ranks start at 0",
          "[config]") {
  const Config config = load_config("", {"debug.slow_ranks=[1, 3]", "debug.slow_factor=3"});
  CHECK(config.debug.slow_ranks == std::vector<int64_t>{1, 3});
  CHECK(config.debug.slow_factor == 3.0);
  CHECK(load_config("", {}).debug.slow_ranks.empty());  // nobody is slowed by default

  const std::string path = write_config("debug.toml", R"([debug]
slow_ranks = [0, -1]
slow_factor = 0.5
)");
  CHECK(problems_of(path) ==
        std::vector<std::string>{path + ":2: debug.slow_ranks: -1 is below the minimum 0",
                                 path + ":3: debug.slow_factor: 0.5 is below the minimum 1"});
  CHECK(problems_of("", {"debug.slow_factor=nan"}) ==
        std::vector<std::string>{"--set debug.slow_factor: nan is not a finite number; use a "
                                 "value >= 1"});
}

TEST_CASE("error feedback's refusal names only what the run set, and nothing a CPU cannot do",
          "[config]") {
  const std::vector<std::string> topk = {"dist.strategy=ddp", "dist.compression.kind=topk"};
  const auto with = [&](std::vector<std::string> settings) {
    settings.insert(settings.begin(), topk.begin(), topk.end());
    return problems_of("", settings);
  };
  CHECK(with({"run.device=cpu", "train.nonfinite=skip"}) ==
        std::vector<std::string>{"<defaults>: dist.compression.error_feedback: \"topk\" with "
                                 "error feedback is not available with train.nonfinite = "
                                 "\"skip\"; use train.nonfinite = \"stop\""});
  CHECK(with({"train.nonfinite=skip"}) == with({"run.device=cpu", "train.nonfinite=skip"}));
  CHECK(with({"run.device=cuda", "train.precision=fp16"}) ==
        std::vector<std::string>{"<defaults>: dist.compression.error_feedback: \"topk\" with "
                                 "error feedback is not available with fp16 loss scaling "
                                 "(train.precision = \"fp16\"); use train.precision = \"bf16\" "
                                 "(or \"fp32\")"});
  const std::vector<std::string> both =
      with({"run.device=cuda", "train.precision=fp16", "train.nonfinite=skip"});
  REQUIRE(both.size() == 1);
  CHECK(contains(both[0], "with fp16 loss scaling (train.precision = \"fp16\") and "
                          "train.nonfinite = \"skip\"; use train.precision = \"bf16\" (or "
                          "\"fp32\") and train.nonfinite = \"stop\""));
  // On CPU fp16 is refused as autocast, with the one hint a CPU run can follow.
  const std::vector<std::string> cpu_fp16 = with({"run.device=cpu", "train.precision=fp16"});
  REQUIRE(cpu_fp16.size() == 1);
  CHECK(contains(cpu_fp16[0], "--set train.precision: \"fp16\" autocast needs CUDA"));
  const std::vector<std::string> ps_cpu_fp16 =
      problems_of("", {"dist.strategy=ps", "run.device=cpu", "train.precision=fp16"});
  REQUIRE(ps_cpu_fp16.size() == 1);
  CHECK(contains(ps_cpu_fp16[0], "use \"fp32\" on CPU"));
}

TEST_CASE("the strategy's requirements of the rest of the config come from dist", "[config]") {
  CHECK(problems_of("", {"dist.strategy=ps", "train.precision=fp16"}) ==
        std::vector<std::string>{"--set dist.strategy: fp16 loss scaling (train.precision = "
                                 "\"fp16\") is not available with \"ps\" (a step skipped for "
                                 "overflow would leave the servers waiting); use "
                                 "train.precision = \"bf16\""});
  // ZeRO agrees on overflow across the ranks' gradient shards (trainer/precision.h).
  CHECK(problems_of("", {"dist.strategy=zero", "train.precision=fp16"}).empty());
  CHECK(problems_of("", {"dist.strategy=ddp", "train.precision=fp16"}).empty());
}

TEST_CASE("dist.compression: kinds, ranges and strategies are checked", "[config]") {
  CHECK(problems_of("", {"dist.strategy=ddp", "dist.compression.kind=top1"}) ==
        std::vector<std::string>{"--set dist.compression.kind: \"top1\" is not one of: none, "
                                 "fp16, bf16, topk, powersgd, onebit (did you mean topk?)"});
  const std::vector<std::string> ranges = problems_of(
      "", {"dist.strategy=ddp", "dist.compression.kind=topk", "dist.compression.ratio=0",
           "dist.compression.rank=0", "dist.compression.chunk=12"});
  CHECK(ranges == std::vector<std::string>{
                      "--set dist.compression.ratio: 0 is outside [1e-06, 1]",
                      "--set dist.compression.rank: 0 is outside [1, 1024]",
                      "--set dist.compression.chunk: 12 is not a multiple of 8 (the signs are "
                      "packed 8 to a byte); use 16"});
  // Under ZeRO only stage 2 compresses (a reduce-scatter of the codec's messages).
  for (const auto& [sets, stage] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{"dist.strategy=zero"}, 1}, {{"dist.strategy=zero", "dist.zero.stage=3"}, 3}}) {
    std::vector<std::string> with_codec = sets;
    with_codec.push_back("dist.compression.kind=fp16");
    CHECK(problems_of("", with_codec) ==
          std::vector<std::string>{"--set dist.compression.kind: \"fp16\": dist.compression is "
                                   "available with dist.strategy = \"ddp\", \"ps\" and \"zero\" "
                                   "at dist.zero.stage = 2 in this version; use one of those, "
                                   "or kind = \"none\" under \"zero\" stage " +
                                   std::to_string(stage)});
  }
  // Under the parameter server both transports compress; over messages, all but PowerSGD.
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.transport=collectives",
                         "dist.compression.kind=powersgd"})
            .empty());
  for (const char* messages :
       {"dist.ps.transport=messages", "dist.ps.consistency=async", "dist.ps.placement=dedicated"}) {
    for (const char* kind : {"dist.compression.kind=fp16", "dist.compression.kind=bf16",
                             "dist.compression.kind=topk", "dist.compression.kind=onebit"}) {
      CHECK(problems_of("", {"dist.strategy=ps", messages, kind}).empty());
    }
    CHECK(problems_of("", {"dist.strategy=ps", messages, "dist.compression.kind=powersgd"}) ==
          std::vector<std::string>{
              "--set dist.compression.kind: \"powersgd\" is not available over the parameter "
              "server's messages transport: its power iteration all-reduces its factors across "
              "the workers, which pushes to servers have no form of; use it with placement "
              "\"colocated\", consistency \"bsp\" or \"ssp\" and dist.ps.transport = "
              "\"collectives\", or another codec"});
  }
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.placement=dedicated",
                         "dist.ps.consistency=async", "dist.ps.tolerate_worker_loss=true",
                         "dist.compression.kind=fp16"})
            .size() == 1);
  CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=2",
                         "dist.compression.kind=topk"})
            .empty());
  CHECK(problems_of("", {"dist.strategy=ddp", "dist.compression.kind=onebit",
                         "train.precision=fp16"})
            .size() == 1);
  CHECK(problems_of("", {"dist.strategy=ddp", "dist.compression.kind=fp16",
                         "train.precision=fp16"})
            .empty());
  CHECK(warnings_of("", {"dist.strategy=single", "dist.compression.kind=powersgd"}) ==
        std::vector<std::string>{"--set dist.compression.kind: has no effect under "
                                 "dist.strategy = \"single\""});
}

TEST_CASE("a key of a strategy other than the chosen one is a warning", "[config]") {
  const std::string path = write_config("other_strategy.toml", R"([dist]
strategy = "zero"
[dist.ddp]
overlap = false
)");
  CHECK(warnings_of(path, {"dist.ddp.bucket_mb=4"}) ==
        std::vector<std::string>{
            path + ":4: dist.ddp.overlap: has no effect under dist.strategy = \"zero\"",
            "--set dist.ddp.bucket_mb: has no effect under dist.strategy = \"zero\""});
  CHECK(warnings_of(path, {"dist.strategy=ddp"}).empty());
  // The resolved config writes every key, the other strategies' at their defaults: no warning.
  const Config zero = load_config("", {"dist.strategy=zero"});
  const std::string resolved = write_config("zero_resolved.toml", dtrain::trainer::to_toml(zero));
  CHECK(warnings_of(resolved).empty());
  // But an override is the user's, at its default too.
  CHECK(warnings_of(resolved, {"dist.ddp.overlap=true"}) ==
        std::vector<std::string>{
            "--set dist.ddp.overlap: has no effect under dist.strategy = \"zero\""});
}

TEST_CASE("a key written at its default that has no effect is a warning too", "[config]") {
  // staleness = 2 is SSP's default: under bsp it would go unsaid, and the run be BSP.
  const std::string path = write_config("ssp_default.toml", R"([dist]
strategy = "ps"
[dist.ps]
staleness = 2
[optim]
name = "adamw"
momentum = 0.9
)");
  CHECK(warnings_of(path) ==
        std::vector<std::string>{
            path + ":4: dist.ps.staleness: has no effect under dist.ps.consistency = \"bsp\"",
            path + ":7: optim.momentum: has no effect under optim.name = \"adamw\""});
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.staleness=2"}) ==
        std::vector<std::string>{"--set dist.ps.staleness: has no effect under "
                                 "dist.ps.consistency = \"bsp\""});
  CHECK(warnings_of(path, {"dist.ps.consistency=ssp", "optim.name=sgd"}).empty());
}

TEST_CASE("a compression key the chosen codec does not read is a warning", "[config]") {
  const std::string path = write_config("codec_keys.toml", R"([dist]
strategy = "ddp"
[dist.compression]
kind = "powersgd"
ratio = 0.05
momentum = 0.9
)");
  CHECK(warnings_of(path, {"dist.compression.sparsity_warmup_steps=100"}) ==
        std::vector<std::string>{
            path + ":5: dist.compression.ratio: has no effect under dist.compression.kind = "
                   "\"powersgd\"",
            path + ":6: dist.compression.momentum: has no effect under dist.compression.kind = "
                   "\"powersgd\"",
            "--set dist.compression.sparsity_warmup_steps: has no effect under "
            "dist.compression.kind = \"powersgd\""});
  const std::vector<std::string> ddp = {"dist.strategy=ddp"};
  const auto with = [&](std::vector<std::string> settings) {
    settings.insert(settings.begin(), ddp.begin(), ddp.end());
    return warnings_of("", settings);
  };
  CHECK(with({"dist.compression.kind=fp16", "dist.compression.ratio=0.1",
              "dist.compression.error_feedback=false", "dist.compression.warmup_steps=10"}) ==
        std::vector<std::string>{
            "--set dist.compression.ratio: has no effect under dist.compression.kind = "
            "\"fp16\"",
            "--set dist.compression.error_feedback: has no effect under dist.compression.kind "
            "= \"fp16\""});
  CHECK(with({"dist.compression.warmup_steps=10", "dist.compression.rank=2"}) ==
        std::vector<std::string>{
            "--set dist.compression.rank: has no effect under dist.compression.kind = \"none\"",
            "--set dist.compression.warmup_steps: has no effect under dist.compression.kind = "
            "\"none\""});
  CHECK(with({"dist.compression.kind=onebit", "dist.compression.chunk=64",
              "dist.compression.rank=2"}) ==
        std::vector<std::string>{"--set dist.compression.rank: has no effect under "
                                 "dist.compression.kind = \"onebit\""});
  CHECK(with({"dist.compression.kind=topk", "dist.compression.ratio=0.1",
              "dist.compression.sparsity_warmup_steps=100", "dist.compression.chunk=64"}) ==
        std::vector<std::string>{"--set dist.compression.chunk: has no effect under "
                                 "dist.compression.kind = \"topk\""});
  CHECK(with({"dist.compression.kind=topk", "dist.compression.momentum=0.9",
              "dist.compression.error_feedback=false", "optim.momentum=0"}) ==
        std::vector<std::string>{"--set dist.compression.momentum: has no effect under "
                                 "dist.compression.error_feedback = false (DGC's momentum "
                                 "correction accumulates into the residual)"});
  CHECK(with({"dist.compression.kind=powersgd", "dist.compression.rank=2",
              "dist.compression.error_feedback=false"})
            .empty());
  // Values left at their defaults say nothing, nor does the resolved config of a codec run.
  const Config topk = load_config("", {"dist.strategy=ddp", "dist.compression.kind=topk"});
  CHECK(warnings_of(write_config("topk_resolved.toml", dtrain::trainer::to_toml(topk))).empty());
}

TEST_CASE("DGC's momentum correction beside the optimizer's momentum is a warning", "[config]") {
  const std::vector<std::string> dgc = {"dist.strategy=ddp", "dist.compression.kind=topk",
                                        "dist.compression.momentum=0.9"};
  const auto with = [&](std::vector<std::string> settings) {
    settings.insert(settings.begin(), dgc.begin(), dgc.end());
    return warnings_of("", settings);
  };
  // optim.momentum at its default (0.9) counts: sgd applies it.
  CHECK(with({}) == std::vector<std::string>{
                        "--set dist.compression.momentum: DGC's momentum correction with "
                        "optim.momentum = 0.9 (optim.name = \"sgd\") applies momentum twice; "
                        "give the optimizer none: optim.momentum = 0"});
  const std::vector<std::string> nesterov = with({"optim.nesterov=true"});
  REQUIRE(nesterov.size() == 1);
  CHECK(contains(nesterov[0], "optim.momentum = 0 and optim.nesterov = false"));
  const std::vector<std::string> lars = with({"optim.name=lars", "optim.momentum=0.8"});
  REQUIRE(lars.size() == 1);
  CHECK(contains(lars[0], "optim.momentum = 0.8 (optim.name = \"lars\")"));
  CHECK(with({"optim.momentum=0"}).empty());
  CHECK(with({"optim.name=adamw"}).empty());  // adamw has no momentum buffer
  // The shipped compressed config, as its comment says to run it.
  const std::string compressed = std::string(DTRAIN_SOURCE_DIR) +
                                 "/configs/fashion_mnist_compressed.toml";
  const std::vector<std::string> shipped =
      warnings_of(compressed, {"dist.compression.momentum=0.9"});
  REQUIRE(shipped.size() == 1);
  CHECK(contains(shipped[0], "--set dist.compression.momentum: DGC's momentum correction with "
                             "optim.momentum = 0.9"));
  CHECK(warnings_of(compressed, {"dist.compression.momentum=0.9", "optim.momentum=0",
                                 "optim.nesterov=false"})
            .empty());
}

TEST_CASE("an optimizer key the chosen optimizer does not read is a warning", "[config]") {
  const std::string path = write_config("optim_keys.toml", R"([optim]
name = "lamb"
trust_coefficient = 0.01
momentum = 0.8
beta1 = 0.95
max_grad_norm = 1.0
)");
  CHECK(warnings_of(path) ==
        std::vector<std::string>{
            path + ":3: optim.trust_coefficient: has no effect under optim.name = \"lamb\"",
            path + ":4: optim.momentum: has no effect under optim.name = \"lamb\""});
  CHECK(warnings_of(path, {"optim.name=lars"}) ==
        std::vector<std::string>{
            path + ":5: optim.beta1: has no effect under optim.name = \"lars\"",
            path + ":6: optim.max_grad_norm: has no effect under optim.name = \"lars\""});
  CHECK(warnings_of("", {"optim.beta1=0.8", "optim.eps=1e-7", "optim.trust_eps=1e-9",
                         "optim.adapt_norm_and_bias=true", "optim.lr=0.2"}) ==
        std::vector<std::string>{
            "--set optim.beta1: has no effect under optim.name = \"sgd\"",
            "--set optim.eps: has no effect under optim.name = \"sgd\"",
            "--set optim.adapt_norm_and_bias: has no effect under optim.name = \"sgd\"",
            "--set optim.trust_eps: has no effect under optim.name = \"sgd\""});
  CHECK(warnings_of("", {"optim.name=adamw", "optim.momentum=0.5", "optim.max_trust_ratio=10"}) ==
        std::vector<std::string>{
            "--set optim.momentum: has no effect under optim.name = \"adamw\"",
            "--set optim.max_trust_ratio: has no effect under optim.name = \"adamw\""});
  CHECK(warnings_of("", {"optim.name=lars", "optim.momentum=0.8", "optim.trust_coefficient=0.01",
                         "optim.max_trust_ratio=10", "optim.weight_decay=0"})
            .empty());
  CHECK(warnings_of("", {"optim.name=lamb", "optim.beta1=0.8", "optim.eps=1e-7",
                         "optim.max_grad_norm=1", "optim.trust_eps=1e-9"})
            .empty());
  // Only keys set to something else than their defaults: sgd's momentum default under lamb
  // says nothing, nor does a saved lamb run's config (eps resolved to 1e-6 in it).
  CHECK(warnings_of("", {"optim.name=lamb"}).empty());
  const Config lamb = load_config("", {"optim.name=lamb"});
  CHECK(warnings_of(write_config("lamb_saved.toml", dtrain::trainer::to_toml(lamb))).empty());
  // nesterov under another optimizer is an error, not also a warning.
  CHECK(problems_of("", {"optim.name=adamw", "optim.nesterov=true"}).size() == 1);
}

TEST_CASE("dist.zero.stage: 1, 2 and 3 load, any other is one line naming the range",
          "[config]") {
  CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=2"}).empty());
  CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=3"}).empty());
  for (const std::string stage : {"0", "4"}) {
    CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=" + stage}) ==
          std::vector<std::string>{"--set dist.zero.stage: " + stage + " is outside [1, 3]"});
  }
  CHECK(warnings_of("", {"dist.strategy=zero", "dist.zero.bucket_mb=4"}) ==
        std::vector<std::string>{"--set dist.zero.bucket_mb: has no effect under "
                                 "dist.zero.stage = 1"});
  CHECK(warnings_of("", {"dist.strategy=zero", "dist.zero.stage=2", "dist.zero.bucket_mb=4"})
            .empty());
}

TEST_CASE("dist.zero.prefetch: a count of units >= 0, for stage 3 only", "[config]") {
  CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=3", "dist.zero.prefetch=0"})
            .empty());
  CHECK(problems_of("", {"dist.strategy=zero", "dist.zero.stage=3", "dist.zero.prefetch=-1"}) ==
        std::vector<std::string>{"--set dist.zero.prefetch: -1 is outside [0, 1024]"});
  const std::vector<std::string> fractional =
      problems_of("", {"dist.strategy=zero", "dist.zero.stage=3", "dist.zero.prefetch=1.5"});
  REQUIRE(fractional.size() == 1);
  CHECK(contains(fractional[0], "--set dist.zero.prefetch: expected an integer"));
  CHECK(warnings_of("", {"dist.strategy=zero", "dist.zero.stage=2", "dist.zero.prefetch=3"}) ==
        std::vector<std::string>{"--set dist.zero.prefetch: has no effect under "
                                 "dist.zero.stage = 2"});
  CHECK(warnings_of("", {"dist.strategy=zero", "dist.zero.stage=3", "dist.zero.prefetch=3"})
            .empty());
}

TEST_CASE("dist.ps.ssp_reads and predict_weights: ssp only", "[config]") {
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.consistency=ssp",
                         "dist.ps.ssp_reads=fresh"})
            .size() == 1);
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.consistency=bsp", "dist.ps.ssp_reads=exact",
                         "dist.ps.predict_weights=true"}) ==
        std::vector<std::string>{
            "--set dist.ps.ssp_reads: has no effect under dist.ps.consistency = \"bsp\"",
            "--set dist.ps.predict_weights: has no effect under dist.ps.consistency = \"bsp\""});
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.consistency=ssp", "dist.ps.ssp_reads=exact"})
            .empty());
}
TEST_CASE("dist.ps.link_ctas: p2p's, 0 to 64", "[config]") {
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.link_ctas=-1"}).size() == 1);
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.link_ctas=65"}).size() == 1);
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.transport=messages",
                         "dist.ps.link_ctas=4"}) ==
        std::vector<std::string>{
            "--set dist.ps.link_ctas: has no effect under dist.ps.transport = \"messages\""});
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.transport=p2p", "dist.ps.link_ctas=0"})
            .empty());
}

TEST_CASE("dist.ps.p2p_links: auto, shared or communicator", "[config]") {
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.p2p_links=nccl"}).size() == 1);
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.transport=p2p", "dist.ps.p2p_links=shared"})
            .empty());
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.transport=collectives",
                         "dist.ps.p2p_links=shared"}) ==
        std::vector<std::string>{
            "--set dist.ps.p2p_links: has no effect under dist.ps.transport = \"collectives\""});
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.transport=p2p", "dist.ps.p2p_links=shared",
                         "dist.ps.link_ctas=4"}) ==
        std::vector<std::string>{"--set dist.ps.link_ctas: has no effect under "
                                 "dist.ps.p2p_links = \"shared\" (no kernel carries the links)"});
}

TEST_CASE("partial reads' keys warn without partial reads, servers without dedicated placement",
          "[config]") {
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.consistency=ssp", "dist.ps.previews=1",
                         "dist.ps.servers=2"}) ==
        std::vector<std::string>{
            "--set dist.ps.servers: has no effect under dist.ps.placement = \"colocated\" "
            "(every worker serves a shard)",
            "--set dist.ps.previews: has no effect under dist.ps.ssp_reads = \"newest\" (it "
            "shapes partial reads)"});
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.consistency=ssp", "dist.ps.ssp_reads=partial",
                         "optim.name=sgd", "dist.ps.transport=p2p", "dist.ps.partial_wait=0.1",
                         "dist.ps.preview_fill=zero"})
            .empty());
  CHECK(warnings_of("", {"dist.strategy=ps", "dist.ps.placement=dedicated", "dist.ps.servers=2"})
            .empty());
}

TEST_CASE("dist.ps.ssp_reads = \"partial\": messages or p2p, no hierarchy, SGD", "[config]") {
  const std::vector<std::string> partial = {"dist.strategy=ps", "dist.ps.consistency=ssp",
                                            "dist.ps.ssp_reads=partial", "optim.name=sgd"};
  CHECK(problems_of("", partial).empty());
  const auto with = [&](const std::string& setting) {
    std::vector<std::string> settings = partial;
    settings.push_back(setting);
    return problems_of("", settings);
  };
  std::vector<std::string> problems = with("dist.ps.transport=collectives");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "--set dist.ps.ssp_reads: \"partial\" needs transport \"p2p\" "
                              "or \"messages\" without a hierarchy"));
  CHECK(with("dist.ps.hierarchical=true").size() == 1);
  problems = with("optim.name=adamw");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "previews a round with SGD's update; optim.name = \"adamw\""));
  CHECK(with("dist.ps.transport=p2p").empty());
}

TEST_CASE("dist.ps.sync_steps: ssp over p2p only, a count of steps", "[config]") {
  const std::vector<std::string> sync = {"dist.strategy=ps", "dist.ps.consistency=ssp",
                                         "dist.ps.sync_steps=60"};
  const auto with = [&](const std::string& setting) {
    std::vector<std::string> settings = sync;
    settings.push_back(setting);
    return problems_of("", settings);
  };
  CHECK(with("dist.ps.transport=p2p").empty());
  std::vector<std::string> problems = with("dist.ps.transport=collectives");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "--set dist.ps.sync_steps: 60 needs dist.ps.transport = \"p2p\" "
                              "(set it; this run has \"collectives\")"));
  CHECK(with("dist.ps.transport=auto").size() == 1);
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.transport=p2p",
                         "dist.ps.sync_steps=-1"}).size() == 1);
}

TEST_CASE("dist.ps.transport = \"p2p\": colocated bsp and ssp, no norms over servers, no codec",
          "[config]") {
  const std::vector<std::string> p2p = {"dist.strategy=ps", "dist.ps.transport=p2p"};
  CHECK(problems_of("", p2p).empty());
  const auto with = [&](const std::string& setting) {
    std::vector<std::string> settings = p2p;
    settings.push_back(setting);
    return problems_of("", settings);
  };
  std::vector<std::string> problems = with("dist.ps.consistency=async");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "--set dist.ps.transport: \"p2p\" serves placement "
                              "\"colocated\" with consistency \"bsp\" or \"ssp\""));
  CHECK(with("dist.ps.placement=dedicated").size() == 1);
  problems = with("optim.name=lamb");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "\"p2p\" with optim.name = \"lamb\": its norms span the servers"));
  problems = with("dist.compression.kind=bf16");
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "not available over the parameter server's \"p2p\" transport"));
  CHECK(problems_of("", {"dist.strategy=ps", "dist.ps.transport=p2p", "dist.ps.consistency=ssp",
                         "dist.ps.ssp_reads=exact"})
            .size() == 1);
}

TEST_CASE("autocast precisions are rejected on a CPU run", "[config]") {
  const std::vector<std::string> problems =
      problems_of("", {"run.device=cpu", "train.precision=bf16"});
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], "--set train.precision: \"bf16\" autocast needs CUDA"));
}

TEST_CASE("train.cuda_graph = \"on\" names each setting it cannot capture", "[config]") {
  CHECK(problems_of("", {"train.cuda_graph=on", "run.device=cuda"}).empty());
  // "auto" (the default) captures where it can and runs eagerly elsewhere, without a word.
  CHECK(problems_of("", {"run.device=cpu", "dist.strategy=ddp", "train.grad_accum=2"}).empty());
  const std::vector<std::string> problems =
      problems_of("", {"train.cuda_graph=on", "run.device=cpu", "dist.strategy=zero",
                       "train.grad_accum=2", "train.nonfinite=skip", "debug.slow_ranks=[0]"});
  REQUIRE(problems.size() == 5);
  CHECK(contains(problems[0], "--set train.cuda_graph: \"on\" needs run.device = \"cuda\""));
  CHECK(contains(problems[1], "dist.strategy = \"single\" or \"ddp\", not \"zero\""));
  CHECK(contains(problems[2], "train.grad_accum = 1"));
  CHECK(contains(problems[3], "train.nonfinite = \"skip\""));
  CHECK(contains(problems[4], "debug.*"));
  CHECK(contains(problems_of("", {"train.cuda_graph=on", "run.device=cuda",
                                  "train.precision=fp16"})[0],
                 "fp16 loss scaling"));
  // DDP is captured, its gradients reduced after each replay; not with what acts inside.
  CHECK(problems_of("", {"train.cuda_graph=on", "run.device=cuda", "dist.strategy=ddp"}).empty());
  const std::vector<std::string> ddp_problems =
      problems_of("", {"train.cuda_graph=on", "run.device=cuda", "dist.strategy=ddp",
                       "dist.compression.kind=fp16", "model.sync_batchnorm=true"});
  REQUIRE(ddp_problems.size() == 2);
  CHECK(contains(ddp_problems[0], "without gradient compression"));
  CHECK(contains(ddp_problems[1], "model.sync_batchnorm"));
}

TEST_CASE("--set overrides parse TOML values and bare words", "[config]") {
  const Config config = load_config(
      "", {"optim.lr=0.5", "model.name=resnet34", "data.shuffle=false", "schedule.milestones=[3]"});
  CHECK(config.optim.lr == 0.5);
  CHECK(config.model.name == "resnet34");
  CHECK_FALSE(config.data.shuffle);
  CHECK(config.schedule.milestones == std::vector<int64_t>{3});

  const std::vector<std::string> problems = problems_of("", {"optim.lrate=1", "epochs=3"});
  REQUIRE(problems.size() == 2);
  CHECK(problems[0] == "--set epochs=3: expected section.key=value");
  CHECK(problems[1] == "--set optim.lrate: unknown key (did you mean optim.lr?)");

  // A bare word is taken whole, quotes and control characters included (fuzz/config_fuzz.cpp
  // found a newline ending the loader in an uncaught exception); bytes that are not UTF-8 are
  // a problem of the key.
  CHECK(load_config("", {"data.path=/data/a\"b\\c\nd"}).data.path == "/data/a\"b\\c\nd");
  const std::vector<std::string> not_utf8 = problems_of("", {"data.path=/data/\xff"});
  REQUIRE(not_utf8.size() == 1);
  CHECK(not_utf8[0].rfind("--set data.path: ", 0) == 0);
}

TEST_CASE("an override's unknown section or subsection is the override's, with a hint",
          "[config]") {
  const std::string path = write_config("plain.toml", "[optim]\nlr = 0.1\n");
  CHECK(problems_of(path, {"dist.zer.stage=2"}) ==
        std::vector<std::string>{"--set dist.zer.stage: unknown section dist.zer (did you mean "
                                 "dist.zero.stage?)"});
  CHECK(problems_of(path, {"dist.zer.foo=2"}) ==
        std::vector<std::string>{"--set dist.zer.foo: unknown section dist.zer (did you mean "
                                 "dist.zero?)"});
  CHECK(problems_of(path, {"trian.epochs=3"}) ==
        std::vector<std::string>{"--set trian.epochs: unknown section trian (did you mean "
                                 "train.epochs?)"});
  CHECK(problems_of(path, {"foo.bar=1"}) ==
        std::vector<std::string>{"--set foo.bar: unknown section foo (did you mean run?)"});
  CHECK(problems_of(path, {"optim.lr.x=1"}) ==
        std::vector<std::string>{"--set optim.lr.x: optim.lr is a key, not a section; set it "
                                 "as --set optim.lr=VALUE"});
  CHECK(problems_of(path, {"dist.ddp=1"}) ==
        std::vector<std::string>{"--set dist.ddp: is a section, not a key (its keys read "
                                 "dist.ddp.KEY)"});
  // Leaf keys, as before; the file's own problems keep their lines.
  CHECK(problems_of(path, {"optim.lrr=1"}) ==
        std::vector<std::string>{"--set optim.lrr: unknown key (did you mean optim.lr?)"});
  const std::string bad = write_config("bad_subsection.toml", "[dist.zer]\nstage = 2\n");
  CHECK(problems_of(bad, {"dist.zer.stage=3"}) ==
        std::vector<std::string>{bad + ":1: dist.zer: unknown section (did you mean dist.zero?)",
                                 "--set dist.zer.stage: unknown section dist.zer (did you mean "
                                 "dist.zero.stage?)"});
}

TEST_CASE("subsections such as [dist.ddp] load, override and reject unknown keys", "[config]") {
  const std::string path =
      write_config("ddp.toml", "[dist]\nstrategy = \"ddp\"\n\n[dist.ddp]\nbucket_mb = 4.0\n");
  Config config = load_config(path, {"dist.ddp.overlap=false"});
  CHECK(config.dist.strategy == dtrain::dist::StrategyKind::kDdp);
  CHECK(config.dist.ddp.bucket_mb == 4.0);
  CHECK_FALSE(config.dist.ddp.overlap);

  const std::string unknown = write_config("ddp_unknown.toml", "[dist.ddp]\nbucket_size = 4.0\n");
  CHECK(problems_of(unknown) ==
        std::vector<std::string>{unknown + ":2: dist.ddp.bucket_size: unknown key (did you mean "
                                           "dist.ddp.bucket_mb?)"});
  const std::string bad = write_config("ddp_bad.toml", "[dist.ddp]\nbuffers = \"sync\"\n");
  CHECK(problems_of(bad) ==
        std::vector<std::string>{bad + ":2: dist.ddp.buffers: \"sync\" is not one of: "
                                       "broadcast, average, local"});
  // The resolved config writes the subsection back and reloads to the same values.
  const std::string resolved = write_config("ddp_resolved.toml", dtrain::trainer::to_toml(config));
  CHECK(dtrain::trainer::to_toml(load_config(resolved, {})) == dtrain::trainer::to_toml(config));
}

TEST_CASE("missing files and syntax errors are one line each", "[config]") {
  std::vector<std::string> problems = problems_of("/nonexistent/dtrain.toml");
  REQUIRE(problems.size() == 1);
  CHECK(problems[0] == "/nonexistent/dtrain.toml: config file not found");

  const std::string path = write_config("syntax.toml", "[run]\nseed = = 3\n");
  problems = problems_of(path);
  REQUIRE(problems.size() == 1);
  CHECK(contains(problems[0], path + ":2:"));
  CHECK(contains(problems[0], "TOML syntax error"));
}

TEST_CASE("the resolved config reloads to the same values", "[config]") {
  Config config = load_config("", {"optim.lr=0.25", "schedule.milestones=[5, 9]", "run.seed=3"});
  const std::string path = write_config("resolved.toml", dtrain::trainer::to_toml(config));
  const Config reloaded = load_config(path, {});
  CHECK(dtrain::trainer::to_toml(reloaded) == dtrain::trainer::to_toml(config));
  CHECK(reloaded.optim.lr == 0.25);
  CHECK(reloaded.schedule.milestones == std::vector<int64_t>{5, 9});
}

TEST_CASE("the resolved config writes decimals as they were given, and they reload exactly",
          "[config]") {
  const Config config = load_config("", {"optim.lr=0.3", "optim.weight_decay=1e-4",
                                         "schedule.warmup_epochs=0.1", "train.max_steps=7"});
  const std::string toml = dtrain::trainer::to_toml(config);
  CHECK(contains(toml, "\nlr = 0.3\n"));
  CHECK(contains(toml, "weight_decay = 0.0001\n"));
  CHECK(contains(toml, "warmup_epochs = 0.1\n"));
  const Config reloaded = load_config(write_config("decimals.toml", toml), {});
  CHECK(reloaded.optim.lr == 0.3);
  CHECK(reloaded.optim.weight_decay == 1e-4);
  CHECK(reloaded.schedule.warmup_epochs == 0.1);
}

TEST_CASE("optim.eps takes the chosen optimizer's default, and the saved config shows it",
          "[config]") {
  const Config lamb = load_config("", {"optim.name=lamb"});
  CHECK(lamb.optim.eps == 1e-6);
  const std::string path = write_config("lamb_resolved.toml", dtrain::trainer::to_toml(lamb));
  CHECK(load_config(path, {"optim.name=adamw"}).optim.eps == 1e-6);  // now set explicitly
  CHECK(load_config("", {"optim.name=adamw"}).optim.eps == 1e-8);
  CHECK(load_config("", {"optim.name=lamb", "optim.eps=1e-7"}).optim.eps == 1e-7);
  CHECK(load_config("", {}).optim.eps == 0.0);  // sgd has no epsilon
}

TEST_CASE("dist.ddp.reduce_dtype \"auto\" is bf16 under bf16 autocast without a codec",
          "[config]") {
  const std::vector<std::string> ddp_bf16 = {"dist.strategy=ddp", "train.precision=bf16"};
  CHECK(load_config("", ddp_bf16).dist.ddp.reduce_dtype == "bf16");
  CHECK(load_config("", {"dist.strategy=ddp"}).dist.ddp.reduce_dtype == "param");
  CHECK(load_config("", {"dist.strategy=ddp", "train.precision=fp16"}).dist.ddp.reduce_dtype ==
        "param");
  std::vector<std::string> with_codec = ddp_bf16;
  with_codec.push_back("dist.compression.kind=powersgd");
  CHECK(load_config("", with_codec).dist.ddp.reduce_dtype == "param");
  std::vector<std::string> forced = {"dist.strategy=ddp", "dist.ddp.reduce_dtype=bf16"};
  CHECK(load_config("", forced).dist.ddp.reduce_dtype == "bf16");  // on fp32 compute too
  // Another strategy keeps "auto": its saved config reloads without a warning.
  const Config zero = load_config("", {"dist.strategy=zero", "train.precision=bf16"});
  CHECK(zero.dist.ddp.reduce_dtype == "auto");
  const std::string path = write_config("zero_bf16.toml", dtrain::trainer::to_toml(zero));
  CHECK(warnings_of(path).empty());
  // Both a reduce dtype and a codec: one line naming the key.
  forced.push_back("dist.compression.kind=fp16");
  CHECK(problems_of("", forced) ==
        std::vector<std::string>{
            "--set dist.ddp.reduce_dtype: \"bf16\" and dist.compression.kind = \"fp16\" both "
            "set the gradients' bytes; choose one (compression.kind = \"bf16\" also casts, "
            "with a scale)"});
}

TEST_CASE("docs/CONFIG.md documents every key", "[config]") {
  std::ifstream doc(std::string(DTRAIN_SOURCE_DIR) + "/docs/CONFIG.md");
  REQUIRE(doc);
  std::stringstream text;
  text << doc.rdbuf();
  std::istringstream keys(dtrain::trainer::describe_keys(/*markdown=*/true));
  std::string row;
  int checked = 0;
  while (std::getline(keys, row)) {
    if (row.rfind("| `", 0) != 0) continue;
    const std::string key = row.substr(2, row.find('`', 3) - 1);
    INFO("key " << key << " is missing from docs/CONFIG.md; regenerate its table with "
                          "trainer --print-config-markdown");
    CHECK(contains(text.str(), row));
    ++checked;
  }
  CHECK(checked > 40);
}

TEST_CASE("every shipped config in configs/ loads without a problem", "[config]") {
  int loaded = 0;
  for (const auto& entry : fs::directory_iterator(std::string(DTRAIN_SOURCE_DIR) + "/configs")) {
    if (entry.path().extension() != ".toml") continue;
    INFO(entry.path().string());
    CHECK(problems_of(entry.path().string()).empty());
    CHECK(warnings_of(entry.path().string()).empty());
    ++loaded;
  }
  CHECK(loaded >= 2);
}

TEST_CASE("a dataset other than Fashion-MNIST left at its default path is refused", "[config]") {
  for (const char* dataset : {"mnist", "cifar10", "image_folder"}) {
    INFO(dataset);
    const std::vector<std::string> problems =
        problems_of("", {std::string("data.dataset=") + dataset});
    REQUIRE(problems.size() == 1);
    CHECK(contains(problems[0], "data.path: /usr/share/datasets/fashion-mnist is "
                                "Fashion-MNIST's directory (the default)"));
    CHECK(problems_of("", {std::string("data.dataset=") + dataset, "data.path=/data/x"}).empty());
  }
  CHECK(problems_of("", {"data.dataset=synthetic"}).empty());
}
