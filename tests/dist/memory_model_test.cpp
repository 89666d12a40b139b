// The model-state memory model (dist/memory_model.h): exact bytes per rank for a small model,
// worked out by hand from each strategy's layout; and, on this world, every strategy's
// `memory/*` stats after two steps equal to what the model predicted for this rank.
#include "dist/factory.h"
#include "dist/memory_model.h"
#include "dist/ps/ps.h"
#include "dist/zero/zero3.h"
#include "optim/state_bytes.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

using dtrain::dist::DistOptions;
using dtrain::dist::MemoryPrediction;
using dtrain::dist::ModelStateBytes;
using dtrain::dist::ModelStateInput;
using dtrain::dist::StrategyKind;
using namespace equivalence;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// The equivalence net's parameters in registration order, as float32: head 30 + 3, body
// 60 + 10, middle 100 + 10 = 213 elements, 852 bytes; momentum SGD (one state tensor).
ModelStateInput small_model() {
  ModelStateInput input;
  for (const int64_t numel : {30, 3, 60, 10, 100, 10}) {
    input.params.push_back(torch::zeros({numel}));
  }
  input.state_tensors = 1;
  return input;
}

void check_ranks(const MemoryPrediction& prediction, const std::vector<ModelStateBytes>& expected) {
  INFO(prediction.strategy);
  REQUIRE(prediction.problem.empty());
  REQUIRE(prediction.ranks.size() == expected.size());
  for (size_t r = 0; r < expected.size(); ++r) {
    INFO("rank " << r);
    CHECK(prediction.ranks[r].parameters == expected[r].parameters);
    CHECK(prediction.ranks[r].gradients == expected[r].gradients);
    CHECK(prediction.ranks[r].optimizer_state == expected[r].optimizer_state);
  }
}

}  // namespace

TEST_CASE("the memory model's bytes per rank for a small model", "[dist][memory]") {
  const ModelStateInput input = small_model();
  DistOptions options;

  // ddp: the whole model, its gradients and its state on every rank.
  options.strategy = StrategyKind::kDdp;
  check_ranks(predict_model_state(options, input, 2), {{852, 852, 852}, {852, 852, 852}});

  // Stage 1 on 2 ranks: the cut falls after body.bias (103 elements on rank 0, 110 on rank 1);
  // the flat buffers hold 2 x 110; gradients: the whole bucket and a 110-element shard.
  options.strategy = StrategyKind::kZero;
  options.zero.stage = 1;
  check_ranks(predict_model_state(options, input, 2), {{880, 1320, 412}, {880, 1320, 440}});

  // Stage 2, buckets of 40 floats, reversed: (middle.bias, middle.weight) 110,
  // (body.bias, body.weight) 70, (head.bias, head.weight) 33, padded to 110, 70, 34 (214).
  // Each rank's shard: 55 + 35 + 17 = 107 elements; rank 1's last 17 hold 16 of head's and
  // one of padding, which has no state. Two buffers of the largest bucket, 110.
  options.zero.stage = 2;
  options.zero.bucket_mb = 160.0 / kMiB;
  check_ranks(predict_model_state(options, input, 2),
              {{(214 + 107) * 4, (107 + 220) * 4, 107 * 4},
               {(214 + 107) * 4, (107 + 220) * 4, 106 * 4}});

  // ps colocated, chunks of at most 50 floats: buckets 110, 70, 33 cut into 37, 37, 36 | 35, 35
  // | 33, placed largest first on the least loaded: server 0 37 + 36 + 33, server 1 37 + 35 + 35.
  options.strategy = StrategyKind::kPs;
  options.ps.chunk_mb = 200.0 / kMiB;
  check_ranks(predict_model_state(options, input, 2),
              {{852 + 424, 852 + 424, 424}, {852 + 428, 852 + 428, 428}});
  // A server's chunks (parameters, gradients and state: 3 x its chunks) in host memory over
  // messages; on its worker's GPU over collectives, which "auto" picks here on GPUs.
  CHECK(predict_model_state(options, input, 2).ranks[0].host == 0);
  options.ps.transport = "messages";
  CHECK(predict_model_state(options, input, 2).ranks[0].host == 3 * 424);
  options.ps.transport = "auto";
  // One dedicated server among 3 ranks: two workers, and a server of every chunk.
  options.ps.placement = "dedicated";
  options.ps.servers = 1;
  check_ranks(predict_model_state(options, input, 3),
              {{852, 852, 0}, {852, 852, 0}, {852, 852, 852}});
  // The workers' model on their device, the server's all in host memory (it runs on the CPU).
  CHECK(predict_model_state(options, input, 3).ranks[0].host == 0);
  CHECK(predict_model_state(options, input, 3).ranks[2].host == 3 * 852);
  CHECK_FALSE(predict_model_state(options, input, 1).problem.empty());  // no worker left

  // A codec's state, in the total. DGC (top-k with momentum): a residual and a momentum per
  // element of the buckets, ddp's 213, ZeRO-2's 214 (its padding too); none on a dedicated
  // server; fp16 keeps none. (e2e.memory_plan checks PowerSGD's against runs.)
  options.compression.kind = "topk";
  options.compression.momentum = 0.9;
  options.strategy = StrategyKind::kDdp;
  MemoryPrediction with_codec = predict_model_state(options, input, 2);
  CHECK(with_codec.ranks[1].codec_state == 2 * 852);
  CHECK(with_codec.ranks[1].total() == 3 * 852 + 2 * 852);
  options.strategy = StrategyKind::kZero;
  CHECK(predict_model_state(options, input, 2).ranks[0].codec_state == 2 * 214 * 4);
  options.strategy = StrategyKind::kPs;
  with_codec = predict_model_state(options, input, 3);
  CHECK(with_codec.ranks[0].codec_state == 2 * 852);
  CHECK(with_codec.ranks[2].codec_state == 0);
  options.compression.kind = "fp16";
  CHECK(predict_model_state(options, input, 3).ranks[0].codec_state == 0);
  options.compression.kind = "none";
  options.ps.placement = "colocated";

  // The paper's figures in fp32, with momentum: 4 + 4 + 4 bytes per parameter, sharded.
  const ModelStateBytes paper = dtrain::dist::paper_bytes(213, 4, 1, 3, 2);
  CHECK(paper.parameters == 107 * 4);
  CHECK(paper.gradients == 107 * 4);
  CHECK(paper.optimizer_state == 107 * 4);
  CHECK(dtrain::dist::paper_bytes(213, 4, 2, 0, 2).total() == 213 * (4 + 4 + 8));
}

TEST_CASE("the parameter server's SSP slots per rank", "[dist][memory][ps]") {
  // At dist.ps.staleness = 1000000 the slots (a model per step of lead over collectives)
  // asked for ~300 GB while the dry run predicted 1.8 MiB. The small model in chunks of at most
  // 50 floats on 2 servers: server 0 holds 106 elements, server 1 107; the model is 852 bytes.
  ModelStateInput input = small_model();
  DistOptions options;
  options.strategy = StrategyKind::kPs;
  options.ps.chunk_mb = 200.0 / kMiB;
  options.ps.consistency = "ssp";
  options.ps.staleness = 2;
  options.ps.transport = "collectives";
  // GPUs: k + 1 versions of the parameters and k + 1 gradient slots.
  CHECK(predict_model_state(options, input, 2).ranks[1].ssp_slots == 6 * 852);
  CHECK(predict_model_state(options, input, 2).ranks[1].total() ==
        2 * (852 + 428) + 428 + 6 * 852);
  options.ps.predict_weights = true;  // and the version before
  CHECK(predict_model_state(options, input, 2).ranks[0].ssp_slots == 7 * 852);
  options.ps.predict_weights = false;
  // CPU ranks: applied a step late, 2 gradient slots and k - 1 + 1 parameter slots.
  input.on_gpus = false;
  CHECK(predict_model_state(options, input, 2).ranks[0].ssp_slots == 4 * 852);
  // bsp: the one parameter slot; the reducer's buckets hold the pushes.
  options.ps.consistency = "bsp";
  CHECK(predict_model_state(options, input, 2).ranks[0].ssp_slots == 852);
  // p2p, rank 0: k + 1 rounds of server 1's 107 elements, k + 2 pushes of its own 106 from
  // worker 1.
  options.ps.consistency = "ssp";
  options.ps.transport = "p2p";
  CHECK(predict_model_state(options, input, 2).ranks[0].ssp_slots == (3 * 107 + 4 * 106) * 4);
  // Messages: none (a server queues a leading worker's pushes as they come).
  options.ps.transport = "messages";
  CHECK(predict_model_state(options, input, 2).ranks[0].ssp_slots == 0);
  options.ps.transport = "collectives";
  options.ps.placement = "dedicated";
  options.ps.servers = 1;
  CHECK(predict_model_state(options, input, 3).ranks[2].ssp_slots == 0);

  // Refused, in one line, past half the memory they would live in.
  options.ps.staleness = 1000;
  const std::string problem =
      dtrain::dist::ps_slots_problem(options.ps, "collectives", 101, 200, "host memory");
  CHECK_THAT(problem, Catch::StartsWith("dist.ps.staleness = 1000 over transport "
                                        "\"collectives\" needs 0.0 GiB of SSP slots") &&
                          Catch::Contains("use transport \"messages\""));
  CHECK(dtrain::dist::ps_slots_problem(options.ps, "collectives", 100, 200, "host memory").empty());
  CHECK(dtrain::dist::ps_slots_problem(options.ps, "collectives", 100, 0, "GPU memory").empty());
  CHECK(dtrain::dist::memory_of(torch::kCPU) > 0);
}

TEST_CASE("every strategy's memory stats are what the model predicts for its rank",
          "[dist][memory]") {
  // Stage 3: CPU ranks only; and world() here, not the trainer's layout that puts dedicated
  // servers on the CPU beside GPU workers (ps_test runs that).
  if (device().is_cuda()) return;
  const std::string optimizer = GENERATE("sgd", "adamw");
  const std::string strategy =
      GENERATE("ddp", "zero stage 1", "zero stage 2", "zero stage 3", "ps colocated",
               "ps dedicated");
  INFO(strategy << ", " << optimizer);
  DistOptions options;
  options.strategy = strategy == "ddp"                 ? StrategyKind::kDdp
                     : strategy.rfind("zero", 0) == 0 ? StrategyKind::kZero
                                                       : StrategyKind::kPs;
  options.zero.stage = strategy == "zero stage 3" ? 3 : strategy == "zero stage 2" ? 2 : 1;
  options.zero.bucket_mb = 40.0 * 8 / kMiB;  // float64 buckets that straddle ranks
  options.ps = ps_harness::ps_options(strategy == "ps dedicated" ? "dedicated" : "colocated", 1, 7);
  const int workers = strategy == "ps dedicated" ? world()->size() - 1 : world()->size();

  const auto optim_options = optimizer_options(optimizer);
  const Data data = make_data(workers);
  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  std::unique_ptr<dtrain::dist::Strategy> made = dtrain::dist::make_strategy(options, world());
  made->attach(*net, factory(optim_options));
  if (auto* ps = dynamic_cast<dtrain::dist::PsStrategy*>(made.get())) {
    ps_harness::run(net, *ps, data, 0, 2, optim_options.lr);
  } else {
    train(net, *made, data, 0, 2, optim_options.lr);
  }

  // The prediction reads a model as built (stage 3 has released this one's parameters).
  Net fresh = make_net();
  std::vector<std::string> names;
  for (const auto& item : fresh->named_parameters()) names.push_back(item.key());
  const ModelStateInput input{
      fresh->parameters(), dtrain::optim::state_tensors_per_parameter(optim_options),
      dtrain::dist::parameters_by_unit(*fresh, fresh->parameters(), names)};
  const MemoryPrediction prediction = predict_model_state(options, input, world()->size());
  REQUIRE(prediction.ranks.size() == static_cast<size_t>(world()->size()));
  const ModelStateBytes& mine = prediction.ranks[world()->rank()];
  const dtrain::dist::Stats stats = made->stats();
  const auto mib = [](int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); };
  CHECK(stat(stats, "memory/optimizer_state_mb") == mib(mine.optimizer_state));
  if (prediction.reports_parameters_and_gradients) {
    CHECK(stat(stats, "memory/parameters_mb") == mib(mine.parameters));
    CHECK(stat(stats, "memory/gradients_mb") == mib(mine.gradients));
  }
  world()->barrier();
}
