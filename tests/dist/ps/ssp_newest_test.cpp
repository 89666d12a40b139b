// SSP(k) over collectives with dist.ps.ssp_reads = "newest": a forward reads the newest
// version that has arrived, never one older than its clock - k. Which version that is depends
// on timing, so the check is made against the versions the run reports: every update must be
// exactly the average of each worker's gradient taken at the version that worker read, and a
// worker that waits (here: one slowed) must have read fresher versions than "exact" would.
// With dist.ps.predict_weights the worker at step t that read version v computed at
// w_v + (t - v)(w_v - w_{v-1}) instead.
// Float64: tolerance 1e-12.
#include "dist/ps/collective.h"

#include "ps/ps_harness.h"

#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

using dtrain::dist::PsCollectiveStrategy;
using dtrain::dist::PsOptions;
using namespace equivalence;
using namespace ps_harness;

namespace {

constexpr int64_t kLongSteps = 12;

Data make_long_data(int64_t world_size) {
  auto gen = at::detail::createCPUGenerator(4321);
  return {at::randn({kLongSteps, world_size * kPerRank, kIn}, gen, torch::kFloat64).to(device()),
          at::randint(kClasses, {kLongSteps, world_size * kPerRank}, gen, torch::kInt64)
              .to(device())};
}

}  // namespace

TEST_CASE("ps over collectives: SSP(k) reads the newest version that has arrived, within k",
          "[dist][ps]") {
  // On CPU ranks a clock is applied one step after its pushes, so k = 2 is the least k that
  // leaves a version to read early (on GPUs, k = 1).
  const int64_t k = GENERATE(2, 3);
  const std::string name = GENERATE("sgd", "lamb");
  const bool predict = GENERATE(false, true);
  INFO(name << ", k = " << k << (predict ? ", weights predicted" : ""));
  const auto options = optimizer_options(name);
  const Data data = make_long_data(world()->size());
  Net net = make_net();
  PsOptions ps = ps_options("colocated", 1, 7, "ssp", k);
  ps.transport = "collectives";
  REQUIRE(ps.ssp_reads == "newest");  // the default
  ps.predict_weights = predict;
  PsCollectiveStrategy strategy(ps, world());
  strategy.attach(*net, factory(options));
  const bool slowed = world()->rank() == 1;
  // [ranks, steps]: the version each rank's forward read, summed over the ranks' rows.
  torch::Tensor read = torch::zeros({world()->size(), kLongSteps}, torch::kFloat64);
  for (int64_t step = 0; step < kLongSteps; ++step) {
    train(net, strategy, data, step, step + 1, options.lr);
    const auto staleness = static_cast<int64_t>(stat(strategy.stats(), "ps/staleness"));
    CHECK(staleness >= 0);
    CHECK(staleness <= std::min(step, k));
    read[world()->rank()][step] = static_cast<double>(step - staleness);
    if (slowed) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  CHECK(stat(strategy.stats(), "ps/staleness_max") <= k);
  strategy.finish();
  if (slowed) {
    // While it slept the others' versions landed: some forward read one newer than t - k.
    torch::Tensor mine = read[world()->rank()].narrow(0, k, kLongSteps - k);
    CHECK((mine > torch::arange(0, kLongSteps - k, torch::kFloat64)).any().item<bool>());
  }
  torch::Tensor all = read.to(device());
  world()->all_reduce(all, dtrain::dist::ReduceOp::kSum)->wait();
  Net reference = train_reference_at_versions(data, options, all.cpu().to(torch::kInt64), predict);
  CHECK(max_difference(*net, *reference) < kTolerance);
}
