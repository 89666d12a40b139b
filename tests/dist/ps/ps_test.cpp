// The parameter server against one process on the whole batch (tests/dist/equivalence.h):
// BSP on N workers must take exactly the steps one process takes on the N-times batch, with
// every optimizer (LARS's and LAMB's norms over tensors cut into chunks on several servers),
// colocated and on dedicated server ranks, with chunks that split tensors; SSP(k) must never
// read parameters more than k steps old, and SSP(0) is BSP; checkpoints carry the servers'
// state to another number of servers and to and from DDP; async with one worker is the
// single-process run. Float64: tolerance 1e-12.
#include "dist/ddp/ddp.h"
#include "dist/ps/collective.h"
#include "dist/ps/plan.h"
#include "dist/ps/ps.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using dtrain::dist::PsCollectiveStrategy;
using dtrain::dist::PsOptions;
using dtrain::dist::PsStrategy;
using dtrain::dist::Role;
using namespace equivalence;
using namespace ps_harness;

TEST_CASE("ps plan: chunks cover every tensor once and balance the servers", "[dist][ps]") {
  const std::vector<int64_t> numels = {30, 3, 100, 10, 7};
  for (int servers = 1; servers <= 3; ++servers) {
    for (const bool whole : {false, true}) {
      const dtrain::dist::PsPlan plan = dtrain::dist::make_ps_plan(numels, servers, 16, whole);
      std::vector<int64_t> covered(numels.size(), 0);
      for (const auto& piece : plan.pieces) {
        CHECK(piece.param_offset == covered[piece.param]);  // in order, no gap, no overlap
        covered[piece.param] += piece.numel;
        CHECK(piece.chunk_offset + piece.numel <= plan.chunks[piece.chunk].numel);
      }
      CHECK(covered == numels);
      for (const auto& chunk : plan.chunks) CHECK(chunk.numel <= 16);
      const std::vector<int64_t> load = plan.server_numel();
      const int64_t most = *std::max_element(load.begin(), load.end());
      const int64_t least = *std::min_element(load.begin(), load.end());
      if (!whole) CHECK(most - least <= 16);  // LPT: within one chunk
      if (whole) {  // every tensor's pieces on one server
        for (const auto& a : plan.pieces) {
          for (const auto& b : plan.pieces) {
            if (a.param == b.param) CHECK(plan.chunks[a.chunk].server == plan.chunks[b.chunk].server);
          }
        }
      }
    }
  }
  // The same inputs, the same plan: every rank computes it alone.
  const auto a = dtrain::dist::make_ps_plan(numels, 3, 16, false);
  const auto b = dtrain::dist::make_ps_plan(numels, 3, 16, false);
  for (size_t c = 0; c < a.chunks.size(); ++c) CHECK(a.chunks[c].server == b.chunks[c].server);
}

TEST_CASE("ps plan: a tensor whose size is a multiple of 16 elements starts aligned",
          "[dist][ps]") {
  // A 10-class bias first in backward's order would put everything after it 40 bytes off.
  const std::vector<int64_t> numels = {64, 64, 3136, 128, 20480, 10};
  for (const int64_t chunk : {int64_t{100}, int64_t{1} << 20}) {
    const dtrain::dist::PsPlan plan = dtrain::dist::make_ps_plan(numels, 2, chunk, false);
    for (const auto& bucket : plan.layout) {
      for (size_t i = 0; i < bucket.params.size(); ++i) {
        CAPTURE(chunk, bucket.params[i]);
        if (numels[bucket.params[i]] % 16 == 0) CHECK(bucket.offsets[i] % 16 == 0);
      }
    }
  }
}

TEST_CASE("ps options: previews past workers - 1 and sync_steps over the whole run are warned of",
          "[dist][ps]") {
  // Both passed silently: 4096 previews with 3 workers (at most 2 a round), and a run that
  // is bsp from its first step to its last.
  dtrain::dist::PsOptions ps;
  ps.consistency = "ssp";
  ps.transport = "p2p";
  CHECK(ps.run_warnings(3, 100).empty());
  ps.previews = 2;
  CHECK(ps.run_warnings(3, 100).empty());
  ps.previews = 4096;
  REQUIRE(ps.run_warnings(3, 100).size() == 1);
  CHECK_THAT(ps.run_warnings(3, 100)[0],
             Catch::StartsWith("dist.ps.previews = 4096 has no effect past 2"));
  ps.previews = 0;
  ps.sync_steps = 99;
  CHECK(ps.run_warnings(3, 100).empty());
  ps.sync_steps = 100;
  REQUIRE(ps.run_warnings(3, 100).size() == 1);
  CHECK_THAT(ps.run_warnings(3, 100)[0],
             Catch::StartsWith("dist.ps.sync_steps = 100 covers the run's 100 steps"));
  ps.consistency = "bsp";  // the consistency's own warning says these have no effect
  ps.previews = 4096;
  CHECK(ps.run_warnings(3, 100).empty());
}

TEST_CASE("ps plan: chunks too small for their number are refused, naming a size that fits",
          "[dist][ps]") {
  using dtrain::dist::kMaxPsChunks;
  const std::vector<int64_t> numels = {800, 25088, 32, 64, 10, 200000};  // 0.86 MiB of floats
  const std::vector<torch::Tensor> params = {torch::zeros({numels[0]}), torch::zeros({numels[1]}),
                                             torch::zeros({numels[2]}), torch::zeros({numels[3]}),
                                             torch::zeros({numels[4]}), torch::zeros({numels[5]})};
  CHECK(dtrain::dist::ps_chunking_problem(numels, 4, 0.1).empty());
  CHECK(dtrain::dist::make_ps_plan(params, 2, 0.1, false).chunks.size() == 9);
  for (const double small : {1e-6, 1e-4}) {
    CAPTURE(small);
    const std::string problem = dtrain::dist::ps_chunking_problem(numels, 4, small);
    CHECK_THAT(problem, Catch::Contains(fmt::format("dist.ps.chunk_mb = {} cuts", small)) &&
                            Catch::Contains(fmt::format("more than the {}", kMaxPsChunks)));
    CHECK_THROWS_WITH(dtrain::dist::make_ps_plan(params, 2, small, false), problem);
    // The size it names fits, and half of it would not.
    const double named = std::stod(problem.substr(problem.find("set it to ") + 10));
    CHECK(dtrain::dist::ps_chunking_problem(numels, 4, named).empty());
    CHECK(dtrain::dist::make_ps_plan(params, 2, named, false).chunks.size() <=
          static_cast<size_t>(kMaxPsChunks));
    CHECK_FALSE(dtrain::dist::ps_chunking_problem(numels, 4, named / 2).empty());
  }
}

TEST_CASE("ps BSP on N workers equals one rank on the N-times batch", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  // Colocated (every rank serves), and 1 to 3 dedicated servers where a worker remains; chunks
  // of 7 elements cut every tensor of the net, 1000 hold it whole.
  const int n = world()->size();
  const std::string placement = GENERATE("colocated", "dedicated");
  const int64_t servers = GENERATE(1, 2, 3);
  const int64_t chunk = GENERATE(7, 1000);
  if (placement == "colocated" && servers > 1) return;
  if (placement == "dedicated" && servers >= n) return;
  INFO(name << ", " << placement << ", " << servers << " server(s), chunks of " << chunk);
  const auto options = optimizer_options(name);
  const PsOptions ps = ps_options(placement, servers, chunk);
  const Data data = make_data(workers(ps));
  Net reference = train_reference(data, options);

  // attach() gives rank 0's; dedicated servers on the CPU beside workers on the test device.
  Net net = placed_net(ps, static_cast<uint64_t>(world()->rank()));
  PsStrategy strategy(ps, placed_world(ps), 60.0);
  strategy.attach(*net, factory(options));
  run(net, strategy, data, 0, kSteps, options.lr, [&](int64_t) {
    CHECK(strategy.last_staleness() == 0);
  });
  if (strategy.role() == Role::kWorker) CHECK(max_difference(*net, *reference) < kTolerance);
  world()->barrier();
}

TEST_CASE("ps: a colocated rank's traffic is its worker's and its server's, each way",
          "[dist][ps]") {
  // Chunks of 1000 hold the net whole on server 0: rank 0's worker moves nothing off the
  // rank, and its server all there is; chunks of 7 spread it over every server.
  const int64_t chunk = GENERATE(7, 1000);
  INFO("chunks of " << chunk);
  const auto options = optimizer_options("sgd");
  const PsOptions ps = ps_options("colocated", 1, chunk);
  const Data data = make_data(workers(ps));
  Net net = make_net();
  PsStrategy strategy(ps, world(), 60.0);
  strategy.attach(*net, factory(options));
  const int me = world()->rank();
  const double others = static_cast<double>(world()->size() - 1);
  double to_others = 0.0, own = 0.0;  // bytes of the shards on other ranks, and of its own
  for (const auto& piece : strategy.plan().chunks) {
    (piece.server == me ? own : to_others) += 8.0 * static_cast<double>(piece.numel);
  }
  run(net, strategy, data, 0, 4, options.lr, [&](int64_t step) {
    INFO("step " << step);
    const dtrain::dist::Stats stats = strategy.stats();
    // Pushes to the other servers and the own server's rounds to the other workers; the
    // other servers' rounds and the other workers' pushes to the own server. A step's
    // forward reads the round before it, which its server has sent by then.
    if (step >= 1) {
      CHECK(stat(stats, "comm/sent_bytes") == to_others + own * others);
      CHECK(stat(stats, "comm/recv_bytes") == to_others + own * others);
    }
    // The wait for parameters is the step's exposed communication, as DDP's wait for a peer.
    CHECK(stat(stats, "comm/exposed_ms") >= stat(stats, "ps/wait_ms") - 0.05);
    CHECK(stat(stats, "comm/exposed_ms") <= stat(stats, "comm/ms") + 1e-9);
  });
  world()->barrier();
}

TEST_CASE("ps async with one worker takes one process's steps", "[dist][ps]") {
  // One push per step, applied at lr / 1 on arrival, on the other ranks as dedicated servers
  // (each tensor whole on one of them, on the CPU): the single-process run, with every
  // optimizer.
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  INFO(name);
  auto options = optimizer_options(name);
  options.max_grad_norm = 0.0;  // LAMB's global clipping: not under async
  const PsOptions ps = ps_options("dedicated", world()->size() - 1, 7, "async");
  const Data data = make_data(1);
  Net reference = train_reference(data, options);
  Net net = placed_net(ps, static_cast<uint64_t>(world()->rank()));
  PsStrategy strategy(ps, placed_world(ps), 60.0);
  strategy.attach(*net, factory(options));
  run(net, strategy, data, 0, kSteps, options.lr);
  if (strategy.role() == Role::kWorker) CHECK(max_difference(*net, *reference) < kTolerance);
  world()->barrier();
}

TEST_CASE("ps SSP(0) is BSP, bit for bit", "[dist][ps]") {
  const auto options = optimizer_options("lamb");
  const Data data = make_data(world()->size());
  Net bsp = train_colocated(ps_options("colocated", 1, 7, "bsp"), options, data);
  Net ssp = train_colocated(ps_options("colocated", 1, 7, "ssp", 0), options, data);
  CHECK(max_difference(*bsp, *ssp) == 0.0);
}

TEST_CASE("ps SSP(k) never reads parameters more than k steps old", "[dist][ps]") {
  // Worker 1 is slowed: the others run ahead of it by up to k steps, never more.
  const int64_t k = GENERATE(1, 2);
  const std::string placement = GENERATE("colocated", "dedicated");
  if (placement == "dedicated" && world()->size() < 3) return;
  INFO("k = " << k << ", " << placement);
  const auto options = optimizer_options("sgd");
  const PsOptions ps = ps_options(placement, 1, 7, "ssp", k);
  const Data data = make_data(workers(ps));
  Net net = placed_net(ps);
  PsStrategy strategy(ps, placed_world(ps), 60.0);
  strategy.attach(*net, factory(options));
  int64_t most = 0;
  const bool slow = strategy.data_group().rank == 1;
  run(net, strategy, data, 0, kSteps, options.lr, [&](int64_t) {
    most = std::max(most, strategy.last_staleness());
    CHECK(strategy.last_staleness() <= k);
    if (slow) strategy.pause(0.05);
  });
  // A fast worker used the slack the bound allows.
  torch::Tensor seen =
      torch::tensor({static_cast<double>(most)}, torch::kFloat64).to(device());
  world()->all_reduce(seen, dtrain::dist::ReduceOp::kSum)->wait();
  CHECK(seen.item<double>() >= 1.0);
  world()->barrier();
}

TEST_CASE("ps resumes on another number of servers, and to and from DDP", "[dist][ps]") {
  const auto options = optimizer_options("adamw");
  const int n = world()->size();
  // ps-ps: steps 0-1 with 1 dedicated server (n - 1 workers), steps 2-3 colocated (n servers,
  // other chunks); ddp-ps and ps-ddp: n workers throughout.
  const std::string route = GENERATE("ps-ps", "ddp-ps", "ps-ddp");
  INFO(route);
  const std::string dir = fresh_directory("ps_checkpoint_test_" + route);
  const PsOptions first_ps = route == "ps-ps" ? ps_options("dedicated", 1, 7)
                                              : ps_options("colocated", 1, 7);
  const int64_t first_workers = route == "ps-ps" ? n - 1 : n;
  const Data data = make_data(n);
  Net reference = train_reference_resumed(data, options, first_workers, n);

  Net net = placed_net(first_ps);
  if (route == "ddp-ps") {
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    ddp.attach(*net, factory(options));
    train(net, ddp, data, 0, 2, options.lr);
    save_checkpoint(ddp, dir);
  } else {
    PsStrategy before(first_ps, placed_world(first_ps), 60.0);
    before.attach(*net, factory(options));
    if (before.role() == Role::kServer) {
      before.serve();
    } else {
      train(net, before, data, 0, 2, options.lr, 1, before.data_group().rank);
      before.prepare_checkpoint();
      if (world()->rank() == 0) before.save(dir);
      before.finish();
    }
    world()->barrier();
  }

  // attach() gives every rank rank 0's weights (a dedicated server's are not the trained ones,
  // and on the CPU).
  net->to(device());
  if (route == "ps-ddp") {
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    ddp.attach(*net, factory(options));
    ddp.load(dir);
    train(net, ddp, data, 2, kSteps, options.lr);
    CHECK(max_difference(*net, *reference) < kTolerance);
    return;
  }
  PsStrategy after(ps_options("colocated", 1, 5), world(), 60.0);
  after.attach(*net, factory(options));
  after.load(dir);
  run(net, after, data, 2, kSteps, options.lr);
  CHECK(max_difference(*net, *reference) < kTolerance);
}

// ---- The collective transport (dist/ps/collective.h): the same servers, their pushes and
// pulls as reduces and broadcasts on the world's communicator.

namespace {

PsOptions collective_options(int64_t chunk_numel, const std::string& consistency = "bsp",
                             int64_t staleness = 0) {
  PsOptions options = ps_options("colocated", 1, chunk_numel, consistency, staleness);
  options.transport = "collectives";
  options.ssp_reads = "exact";  // tests/dist/ps/ssp_newest_test.cpp has "newest"
  return options;
}

// One process, each step's gradient taken at the parameters of `k` updates before (the
// version SSP(k) over collectives reads: max(0, t - k)).
Net train_reference_delayed(const Data& data, const dtrain::optim::OptimizerOptions& options,
                            int64_t k) {
  torch::Tensor read = torch::empty({world()->size(), kSteps}, torch::kInt64);
  for (int64_t step = 0; step < kSteps; ++step) {
    read.select(1, step).fill_(std::max<int64_t>(0, step - k));
  }
  return train_reference_at_versions(data, options, read);
}

}  // namespace

TEST_CASE("ps over collectives: BSP equals one rank on the N-times batch", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  const int64_t chunk = GENERATE(7, 1000);
  const int64_t micro = GENERATE(1, 2);  // gradient accumulation: pushed once per step
  INFO(name << ", chunks of " << chunk << ", " << micro << " micro-step(s)");
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  PsCollectiveStrategy strategy(collective_options(chunk), world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr, micro);
  CHECK(strategy.last_staleness() == 0);
  strategy.finish();
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ps over collectives: SSP(k) takes the steps of gradients k updates old",
          "[dist][ps]") {
  // Whatever the timing (one worker slowed), a worker at step t reads version max(0, t - k):
  // the run is deterministic, and every read is exactly k steps old once t >= k.
  const int64_t k = GENERATE(1, 2, 3);
  const std::string name = GENERATE("sgd", "lamb");
  INFO(name << ", k = " << k);
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference_delayed(data, options, k);
  Net net = make_net();
  PsCollectiveStrategy strategy(collective_options(7, "ssp", k), world());
  strategy.attach(*net, factory(options));
  for (int64_t step = 0; step < kSteps; ++step) {
    train(net, strategy, data, step, step + 1, options.lr);
    CHECK(strategy.last_staleness() == std::min(step, k));
    if (world()->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(stat(strategy.stats(), "ps/staleness_max") == std::min(kSteps - 1, k));
  strategy.finish();
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ps over collectives: SSP(0) is BSP, bit for bit", "[dist][ps]") {
  const auto options = optimizer_options("lamb");
  const Data data = make_data(world()->size());
  Net bsp = make_net();
  {
    PsCollectiveStrategy strategy(collective_options(7, "bsp"), world());
    strategy.attach(*bsp, factory(options));
    train(bsp, strategy, data, 0, kSteps, options.lr);
    strategy.finish();
  }
  Net ssp = make_net();
  PsCollectiveStrategy strategy(collective_options(7, "ssp", 0), world());
  strategy.attach(*ssp, factory(options));
  train(ssp, strategy, data, 0, kSteps, options.lr);
  strategy.finish();
  CHECK(max_difference(*bsp, *ssp) == 0.0);
}

TEST_CASE("ps over collectives resumes from messages and DDP, and messages from it",
          "[dist][ps]") {
  const auto options = optimizer_options("adamw");
  const std::string route = GENERATE("messages-collectives", "ddp-collectives",
                                     "collectives-messages");
  INFO(route);
  const std::string dir = fresh_directory("ps_collective_checkpoint_test_" + route);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net();
  if (route == "ddp-collectives") {
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    ddp.attach(*net, factory(options));
    train(net, ddp, data, 0, 2, options.lr);
    save_checkpoint(ddp, dir);
  } else if (route == "messages-collectives") {
    PsStrategy before(ps_options("colocated", 1, 7), world(), 60.0);
    before.attach(*net, factory(options));
    train(net, before, data, 0, 2, options.lr);
    before.prepare_checkpoint();  // rank 0 asks every server: all keep serving until finish()
    if (world()->rank() == 0) before.save(dir);
    before.finish();
    world()->barrier();
  } else {
    PsCollectiveStrategy before(collective_options(5), world());
    before.attach(*net, factory(options));
    train(net, before, data, 0, 2, options.lr);
    save_checkpoint(before, dir);
    before.finish();
  }
  if (route == "collectives-messages") {
    PsStrategy after(ps_options("colocated", 1, 7), world(), 60.0);
    after.attach(*net, factory(options));
    after.load(dir);
    run(net, after, data, 2, kSteps, options.lr);
    CHECK(max_difference(*net, *reference) < kTolerance);
    return;
  }
  PsCollectiveStrategy after(collective_options(3), world());
  after.attach(*net, factory(options));
  after.load_model_state(dtrain::dist::module_state(*net));
  after.load(dir);
  train(net, after, data, 2, kSteps, options.lr);
  after.finish();
  CHECK(max_difference(*net, *reference) < kTolerance);
}
