// The parameter server's hierarchy (dist.ps.hierarchical, dist/ps/hierarchy.h): each node's
// workers reduce onto one leader, which alone talks to the servers. BSP must still take
// exactly the steps one process takes on the N-times batch (every optimizer, colocated and
// dedicated, chunks that split tensors), SSP(k) must keep its bound, and checkpoints must pass
// to and from runs without the hierarchy. Under plain mpirun the workers form one node;
// tests/CMakeLists.txt also runs this file with DTRAIN_RANKS_PER_NODE=2: at np4, 2 nodes of 2
// workers, or with a dedicated server nodes of 2 and 1. Float64: tolerance 1e-12.
#include "dist/options.h"
#include "dist/ps/ps.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <cstdlib>

using dtrain::dist::PsOptions;
using dtrain::dist::PsStrategy;
using dtrain::dist::Role;
using namespace equivalence;
using namespace ps_harness;

namespace {

PsOptions hierarchical_options(const std::string& placement, int64_t chunk_numel,
                               const std::string& consistency = "bsp", int64_t staleness = 0) {
  PsOptions options = ps_options(placement, 1, chunk_numel, consistency, staleness);
  options.hierarchical = true;
  return options;
}

// The nodes `num_workers` workers (world ranks 0 ..) span: blocks of DTRAIN_RANKS_PER_NODE,
// else one (mpirun on one machine).
int expected_nodes(int num_workers) {
  const char* value = std::getenv("DTRAIN_RANKS_PER_NODE");
  if (value == nullptr || *value == '\0') return 1;
  const int per_node = std::atoi(value);
  return (num_workers + per_node - 1) / per_node;
}

}  // namespace

TEST_CASE("ps hierarchy: BSP on N workers equals one rank on the N-times batch", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  const std::string placement = GENERATE("colocated", "dedicated");
  const int64_t chunk = GENERATE(7, 1000);  // 7 cuts every tensor, 1000 holds it whole
  if (placement == "dedicated" && device().is_cuda()) return;
  INFO(name << ", " << placement << ", chunks of " << chunk);
  const auto options = optimizer_options(name);
  const PsOptions ps = hierarchical_options(placement, chunk);
  const Data data = make_data(workers(ps));
  Net reference = train_reference(data, options);

  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  PsStrategy strategy(ps, world(), 60.0);
  strategy.attach(*net, factory(options));
  CHECK(strategy.num_leaders() == expected_nodes(workers(ps)));
  run(net, strategy, data, 0, kSteps, options.lr, [&](int64_t step) {
    CHECK(strategy.last_staleness() == 0);
    // Every worker's comm/* count what it moved: a leader its pushes and the parameters it
    // took (none before the first step's forward), the others their part of the node's
    // reduce (sent) and of its broadcast (received).
    CHECK(stat(strategy.stats(), "comm/sent_bytes") > 0.0);
    if (step > 0) CHECK(stat(strategy.stats(), "comm/recv_bytes") > 0.0);
  });
  if (strategy.role() == Role::kWorker) CHECK(max_difference(*net, *reference) < kTolerance);
  world()->barrier();
}

TEST_CASE("ps hierarchy: SSP(k) never reads parameters more than k steps old", "[dist][ps]") {
  // Worker 1 (in node 0) is slowed: the other nodes run ahead by up to k steps, never more.
  const int64_t k = GENERATE(1, 2);
  INFO("k = " << k);
  const auto options = optimizer_options("sgd");
  const PsOptions ps = hierarchical_options("colocated", 7, "ssp", k);
  const Data data = make_data(workers(ps));
  Net net = make_net();
  PsStrategy strategy(ps, world(), 60.0);
  strategy.attach(*net, factory(options));
  int64_t most = 0;
  const bool slow = strategy.data_group().rank == 1;
  run(net, strategy, data, 0, kSteps, options.lr, [&](int64_t) {
    most = std::max(most, strategy.last_staleness());
    CHECK(strategy.last_staleness() <= k);
    if (slow) strategy.pause(0.05);
  });
  torch::Tensor seen = torch::tensor({static_cast<double>(most)}, torch::kFloat64).to(device());
  world()->all_reduce(seen, dtrain::dist::ReduceOp::kSum)->wait();
  // A fast node used the slack the bound allows (with one node, nobody runs ahead).
  if (strategy.num_leaders() > 1) CHECK(seen.item<double>() >= 1.0);
  world()->barrier();
}

TEST_CASE("ps hierarchy: checkpoints pass to and from runs without it", "[dist][ps]") {
  const auto options = optimizer_options("adamw");
  const std::string route = GENERATE("hierarchical-flat", "flat-hierarchical");
  INFO(route);
  const std::string dir = fresh_directory("ps_hierarchical_checkpoint_test_" + route);
  const PsOptions hierarchical = hierarchical_options("colocated", 7);
  PsOptions flat = hierarchical_options("colocated", 5);  // other chunks than the hierarchy's
  flat.hierarchical = false;
  const bool first_hierarchical = route == "hierarchical-flat";
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);

  Net net = make_net();
  {
    PsStrategy before(first_hierarchical ? hierarchical : flat, world(), 60.0);
    before.attach(*net, factory(options));
    train(net, before, data, 0, 2, options.lr);
    before.prepare_checkpoint();
    if (world()->rank() == 0) before.save(dir);
    before.finish();
    world()->barrier();
  }
  PsStrategy after(first_hierarchical ? flat : hierarchical, world(), 60.0);
  after.attach(*net, factory(options));
  after.load(dir);
  run(net, after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ps hierarchy: refused over collectives and under async", "[dist][ps]") {
  dtrain::dist::DistOptions options;
  options.strategy = dtrain::dist::StrategyKind::kPs;
  options.ps.hierarchical = true;
  const auto problems = [&] {
    std::string all;
    for (const auto& error : options.validate({})) all += error.key + ": " + error.problem + "\n";
    return all;
  };
  CHECK(problems().empty());  // messages (auto on CPU ranks), bsp
  options.ps.transport = "collectives";
  CHECK_THAT(problems(), Catch::Matchers::Contains("ps.hierarchical: true with transport "
                                                   "\"collectives\""));
  options.ps.transport = "messages";
  options.ps.consistency = "async";
  CHECK_THAT(problems(), Catch::Matchers::Contains("ps.hierarchical: true with consistency "
                                                   "\"async\""));
  // "auto" carries a hierarchy over messages on GPUs too.
  options.ps.transport = "auto";
  options.ps.consistency = "bsp";
  CHECK_FALSE(options.ps.use_collectives(true));
}
