// The seams every strategy is built on: the gradient reducer with a communication hook of the
// test's own (layouts with gaps, launch order, accumulation), and what each strategy owns
// besides the step (data group, metric reduction, consolidated model state).
#include "dist/ddp/ddp.h"
#include "dist/reducer.h"
#include "dist/single.h"
#include "dist/zero/zero.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <algorithm>

using namespace equivalence;
using dtrain::dist::Bucket;
using dtrain::dist::Collective;
using dtrain::dist::GradientReducer;
using dtrain::dist::Layout;
using dtrain::dist::ReduceOp;

namespace {

// Sums every bucket over the ranks and remembers the launch order.
class SumHook : public dtrain::dist::CommHook {
 public:
  explicit SumHook(std::shared_ptr<dtrain::dist::Communicator> comm) : comm_(std::move(comm)) {}
  std::unique_ptr<dtrain::dist::Work> launch(Bucket& bucket) override {
    launched.push_back(bucket.layout.params.front());
    return comm_->all_reduce(bucket.flat, ReduceOp::kSum);
  }
  void finish(Bucket& bucket) override { finished.push_back(bucket.flat.clone()); }
  Collective collective() const override { return Collective::kAllReduce; }

  std::vector<int64_t> launched;
  std::vector<torch::Tensor> finished;

 private:
  std::shared_ptr<dtrain::dist::Communicator> comm_;
};

}  // namespace

TEST_CASE("The reducer hands complete buckets to its hook, gaps zero, in plan order",
          "[dist][reducer]") {
  auto comm = world();
  Net net = make_net(0);
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : net->named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  // Bucket 0: the head (0, 1) with a gap of 5 after each; bucket 1: the rest, packed.
  Layout layout(2);
  const int64_t head_weight = params[0].numel(), head_bias = params[1].numel();
  layout[0] = {{0, 1}, {0, head_weight + 5}, head_weight + 5 + head_bias + 5};
  layout[1] = dtrain::dist::packed_layout({{2, 3, 4, 5}}, params)[0];
  SumHook hook(comm);
  const int64_t accum = GENERATE(1, 2);
  dtrain::dist::ReducerOptions options;
  options.overlap = GENERATE(true, false);
  CAPTURE(accum, options.overlap);
  GradientReducer reducer(params, names, comm, hook, options, layout);

  // Every rank's loss is (rank + 1) x the same loss: the summed gradient is
  // n(n+1)/2 x the single-rank gradient.
  Net reference = make_net(0);
  const Data data = make_data(1);
  torch::nn::functional::cross_entropy(reference->forward(data.x[0]), data.y[0]).backward();

  dtrain::dist::StepComm record(comm->rank(), comm->size());
  for (int64_t m = 0; m < accum; ++m) {
    reducer.before_backward(m + 1 == accum);
    const torch::Tensor loss =
        torch::nn::functional::cross_entropy(net->forward(data.x[0]), data.y[0]);
    (loss * static_cast<double>(comm->rank() + 1) / static_cast<double>(accum)).backward();
    reducer.after_backward(m + 1 == accum, record);
  }
  const double n = comm->size();
  const double factor = n * (n + 1) / 2;
  REQUIRE(hook.launched == std::vector<int64_t>{0, 2});
  const torch::Tensor& head = hook.finished[0];
  CHECK(head.narrow(0, head_weight, 5).abs().max().item<double>() == 0.0);
  CHECK(head.narrow(0, head_weight + 5 + head_bias, 5).abs().max().item<double>() == 0.0);
  const auto expected = reference->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    INFO(names[i]);
    CHECK(torch::allclose(params[i].grad(), expected[i].grad() * factor, 1e-12, 1e-12));
  }
  CHECK(record.stats().size() == 7);
  reducer.after_step();
  for (const torch::Tensor& param : params) CHECK_FALSE(param.grad().defined());
}

// A collective replayed inside a CUDA graph has no time of its own to report: the step's
// figures then leave time out rather than report a part of it as the whole.
TEST_CASE("A step with an unmeasured collective reports its bytes and no time figures",
          "[dist][strategy]") {
  auto comm = world();
  const double n = comm->size();
  dtrain::dist::StepComm record(comm->rank(), comm->size(), comm->now());
  torch::Tensor buffers = torch::ones({4}, torch::dtype(torch::kFloat64).device(device()));
  auto work = comm->all_reduce(buffers, ReduceOp::kSum);
  work->wait();
  record.add(Collective::kAllReduce, dtrain::dist::Traffic::kSmall, 32, std::move(work));
  const auto has = [](const dtrain::dist::Stats& stats, const std::string& name) {
    return std::any_of(stats.begin(), stats.end(),
                       [&](const dtrain::dist::Stat& s) { return s.name == name; });
  };
  CHECK(has(record.stats(), "comm/ms"));
  record.add_unmeasured(Collective::kAllReduce, dtrain::dist::Traffic::kGradients, 1024);
  const dtrain::dist::Stats stats = record.stats();
  CHECK(stat(stats, "comm/collectives") == 2);
  CHECK(stat(stats, "comm/bytes") == 1024);  // buffers' traffic is not counted as payload
  CHECK(stat(stats, "comm/sent_bytes") == (32 + 1024) * 2 * (n - 1) / n);
  for (const char* name : {"comm/ms", "comm/exposed_ms", "comm/busbw_gbps"}) {
    INFO(name);
    CHECK_FALSE(has(stats, name));
  }
  CHECK(record.spans().size() == 1);  // the measured one
}

// A receive posted a step ahead (the p2p parameter server's pulls) moved bytes in the step,
// but its time was mostly a wait on the device for its sender.
TEST_CASE("An untimed receive counts its bytes and leaves the time figures to the rest",
          "[dist][strategy]") {
  auto comm = world();
  dtrain::dist::StepComm record(comm->rank(), comm->size(), comm->now());
  torch::Tensor grads = torch::ones({256}, torch::dtype(torch::kFloat32).device(device()));
  auto work = comm->all_reduce(grads, ReduceOp::kSum);
  work->wait();
  record.add(Collective::kAllReduce, dtrain::dist::Traffic::kGradients, 1024, std::move(work));
  const dtrain::dist::Stats before = record.stats();
  record.add_untimed(Collective::kRecv, dtrain::dist::Traffic::kParameters, 4096, 0);
  const dtrain::dist::Stats after = record.stats();
  CHECK(stat(after, "comm/collectives") == 2);
  CHECK(stat(after, "comm/bytes") == 1024 + 4096);
  CHECK(stat(after, "comm/recv_bytes") == stat(before, "comm/recv_bytes") + 4096);
  CHECK(stat(after, "comm/sent_bytes") == stat(before, "comm/sent_bytes"));
  for (const char* name : {"comm/ms", "comm/exposed_ms", "comm/busbw_gbps"}) {
    INFO(name);
    CHECK(stat(after, name) == stat(before, name));
  }
  CHECK(record.spans().size() == 1);
}

TEST_CASE("Every strategy owns its data group, metric reduction and model state",
          "[dist][strategy]") {
  auto comm = world();
  const auto sgd = optimizer_options("sgd");
  const std::string name = GENERATE("ddp", "zero");
  INFO(name);
  Net net = make_net(static_cast<uint64_t>(comm->rank()), {false, true});
  std::unique_ptr<dtrain::dist::Strategy> strategy;
  if (name == "ddp") strategy = std::make_unique<dtrain::dist::DdpStrategy>(dtrain::dist::DdpOptions{}, comm);
  if (name == "zero") strategy = std::make_unique<dtrain::dist::ZeroStrategy>(comm);
  CHECK(strategy->role() == dtrain::dist::Role::kWorker);
  CHECK(strategy->data_group().rank == comm->rank());
  CHECK(strategy->data_group().size == comm->size());
  strategy->attach(*net, factory(sgd));

  torch::Tensor values = torch::tensor({1.0 + comm->rank(), 2.0}, torch::kFloat64).to(device());
  strategy->reduce_metrics(values, ReduceOp::kSum);
  const double n = comm->size();
  CHECK(values[0].item<double>() == n * (n + 1) / 2);
  CHECK(values[1].item<double>() == 2 * n);

  // The consolidated state names every parameter and buffer as the module does.
  const dtrain::dist::NamedTensors state = strategy->model_state();
  const dtrain::dist::NamedTensors own = dtrain::dist::module_state(*net);
  REQUIRE(state.size() == own.size());
  for (size_t i = 0; i < state.size(); ++i) {
    CHECK(state[i].first == own[i].first);
    CHECK(torch::equal(state[i].second, own[i].second));
  }
  // Loading another model's state makes this one equal to it, on every rank.
  Net other = make_net(42, {false, true});
  strategy->load_model_state(dtrain::dist::module_state(*other));
  CHECK(max_difference(*net, *other) == 0.0);
  CHECK(torch::equal(net->norm->running_var, other->norm->running_var));
}

TEST_CASE("single reports its memory by kind and no communication",
          "[dist][strategy]") {
  std::shared_ptr<dtrain::dist::Communicator> comm =
      world()->split(world()->rank(), 0);  // a world of one per rank
  Net net = make_net(0);
  dtrain::dist::SingleStrategy strategy(comm);
  strategy.attach(*net, factory(optimizer_options("adamw")));
  const Data data = make_data(1);
  train(net, strategy, data, 0, 1, 0.01, 1, 0);
  const dtrain::dist::Stats stats = strategy.stats();
  CHECK(stat(stats, "memory/optimizer_state_mb") > 0.0);
  // The whole model's parameters and, without a reducer, autograd's gradients of them.
  int64_t model_bytes = 0;
  for (const torch::Tensor& param : net->parameters()) model_bytes += param.numel() * 8;
  const double model_mb = static_cast<double>(model_bytes) / (1 << 20);
  CHECK(stat(stats, "memory/parameters_mb") == model_mb);
  CHECK(stat(stats, "memory/gradients_mb") == model_mb);
  CHECK(stats.size() == 3);  // no communication
}
