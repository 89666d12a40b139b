// The parameter server over point-to-point links on the device (dist.ps.transport = "p2p",
// dist/ps/peer.h), against one process on the whole batch (tests/dist/equivalence.h): BSP
// takes its steps with SGD and AdamW, chunks that split tensors and gradient accumulation,
// whatever the timing; SSP(k) with newest reads never reads more than k steps old, and SSP(0)
// is BSP bit for bit; checkpoints go to and from DDP; what it does not serve is refused.
// Float64: tolerance 1e-12. Its partial reads are checked in ssp_partial_test.cpp.
#include "dist/ddp/ddp.h"
#include "dist/ps/peer.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <thread>

using dtrain::dist::PsOptions;
using dtrain::dist::PsPeerStrategy;
using namespace equivalence;
using namespace ps_harness;

namespace {

PsOptions p2p_options(const std::string& consistency, int64_t staleness, int64_t chunk = 1000) {
  PsOptions ps = ps_options("colocated", 1, chunk, consistency, staleness);
  return p2p_transport(ps);
}

}  // namespace

TEST_CASE("ps over p2p: BSP equals one rank on the N-times batch", "[dist][ps]") {
  const std::string name = GENERATE("sgd", "adamw");
  const int64_t chunk = GENERATE(7, 1000);  // 7: chunks split every tensor; 1000: one chunk
  const int64_t micro = GENERATE(1, 2);     // gradient accumulation: pushed once per step
  INFO(name << ", chunks of " << chunk << ", " << micro << " micro-step(s)");
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net(static_cast<uint64_t>(world()->rank()));  // attach() gives rank 0's
  PsPeerStrategy strategy(p2p_options("bsp", 0, chunk), world(), 60.0);
  strategy.attach(*net, factory(options));
  for (int64_t step = 0; step < kSteps; ++step) {
    train(net, strategy, data, step, step + 1, options.lr, micro);
    CHECK(strategy.last_staleness() == 0);
    if (world()->rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  strategy.finish();
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ps over p2p: a step's traffic is its worker's and its server's, each way",
          "[dist][ps]") {
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  Net net = make_net();
  PsPeerStrategy strategy(p2p_options("bsp", 0, 7), world(), 60.0);
  strategy.attach(*net, factory(options));
  const std::vector<int64_t> numel = strategy.plan().server_numel();
  const int me = world()->rank();
  // Bytes (float64) of the shards on other ranks, and the own server's shard to each other
  // worker (or from it).
  double others = 0.0;
  for (int s = 0; s < world()->size(); ++s) {
    if (s != me) others += 8.0 * static_cast<double>(numel[static_cast<size_t>(s)]);
  }
  const double served = 8.0 * static_cast<double>(numel[static_cast<size_t>(me)]) *
                        static_cast<double>(world()->size() - 1);
  for (int64_t step = 0; step < 4; ++step) {
    train(net, strategy, data, step, step + 1, options.lr);
    INFO("step " << step);
    const dtrain::dist::Stats stats = strategy.stats();
    // The worker's pushes (every chunk but the own shard's) and the server's round of the
    // step before, which the forward read. Pulls: BSP reads one round a step, each counted
    // once the next one is read; the server takes the other workers' pushes of that round.
    if (step >= 1) CHECK(stat(stats, "comm/sent_bytes") == others + served);
    if (step >= 2) CHECK(stat(stats, "comm/recv_bytes") == others + served);
    // The read's wait is exposed, as DDP's wait for a peer. The two figures come by different
    // subtractions of the same time points, which on GPUs are CUDA events, whose elapsed
    // times are floats of about half a microsecond's resolution.
    CHECK(stat(stats, "comm/exposed_ms") >= stat(stats, "ps/wait_ms") - 1e-3);
  }
  strategy.finish();
}

TEST_CASE("ps over p2p: SSP(k) with newest reads stays within k, and SSP(0) is BSP",
          "[dist][ps]") {
  const int64_t k = GENERATE(0, 1, 2);
  INFO("k = " << k);
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  Net net = make_net();
  PsOptions ps = p2p_options("ssp", k, 7);
  PsPeerStrategy strategy(ps, world(), 60.0);
  strategy.attach(*net, factory(options));
  int64_t most = 0;
  for (int64_t step = 0; step < kSteps; ++step) {
    train(net, strategy, data, step, step + 1, options.lr);
    most = std::max(most, strategy.last_staleness());
    CHECK(strategy.last_staleness() <= k);
    if (world()->rank() == 1) strategy.pause(0.05);  // the others run ahead, within k
  }
  strategy.finish();
  torch::Tensor seen = torch::tensor({static_cast<double>(most)}, torch::kFloat64).to(device());
  world()->all_reduce(seen, dtrain::dist::ReduceOp::kSum)->wait();
  if (k > 0) CHECK(seen.item<double>() >= 1.0);  // a fast worker used the slack
  if (k == 0) {  // every read waited for the last round: BSP's steps, bit for bit
    Net bsp = make_net();
    PsPeerStrategy lockstep(p2p_options("bsp", 0, 7), world(), 60.0);
    lockstep.attach(*bsp, factory(options));
    train(bsp, lockstep, data, 0, kSteps, options.lr);
    lockstep.finish();
    CHECK(max_difference(*net, *bsp) == 0.0);
  }
}

TEST_CASE("ps over p2p resumes from DDP, and DDP from it", "[dist][ps]") {
  const auto options = optimizer_options("adamw");
  const std::string route = GENERATE("ddp-p2p", "p2p-ddp");
  INFO(route);
  const std::string dir = fresh_directory("ps_p2p_checkpoint_test_" + route);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net();
  if (route == "ddp-p2p") {
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    ddp.attach(*net, factory(options));
    train(net, ddp, data, 0, 2, options.lr);
    save_checkpoint(ddp, dir);
    PsPeerStrategy after(p2p_options("bsp", 0, 5), world(), 60.0);
    after.attach(*net, factory(options));
    after.load_model_state(dtrain::dist::module_state(*net));
    after.load(dir);
    train(net, after, data, 2, kSteps, options.lr);
    after.finish();
  } else {
    PsPeerStrategy before(p2p_options("bsp", 0, 7), world(), 60.0);
    before.attach(*net, factory(options));
    train(net, before, data, 0, 2, options.lr);
    save_checkpoint(before, dir);
    before.finish();
    dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
    ddp.attach(*net, factory(options));
    ddp.load(dir);
    train(net, ddp, data, 2, kSteps, options.lr);
  }
  CHECK(max_difference(*net, *reference) < kTolerance);
}

TEST_CASE("ps over p2p: settings it does not serve are refused", "[dist][ps]") {
  PsOptions ps = p2p_options("async", 0);
  CHECK_THROWS_WITH(PsPeerStrategy(ps, world(), 60.0), Catch::Contains("colocated bsp and ssp"));
  ps = p2p_options("ssp", 2);
  ps.ssp_reads = "exact";
  CHECK_THROWS_WITH(PsPeerStrategy(ps, world(), 60.0), Catch::Contains("\"collectives\""));
}
