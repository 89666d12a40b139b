// ZeRO stage 3 against one process on the whole batch and against DDP
// (tests/dist/equivalence.h): N ranks of batch b, each keeping only its shard of every unit's
// parameters, gradients and optimizer state, must take exactly the steps one process takes on
// batch N*b, with every optimizer (LARS's and LAMB's norms over tensors split across ranks,
// LAMB's clipping over all of them), with gradient accumulation and with any prefetch depth;
// the units (70, 110 and 33 parameters) divide by none of 2, 3 and 4 ranks. Between steps no
// unit holds memory, a rank's parameters are 1/N of the model plus padding, and no more than
// prefetch + 1 units are ever whole. Checkpoints go to and from stage 2 and DDP on another
// number of ranks. Float64: tolerance 1e-12. On the CPU over MPI, and over NCCL on one GPU per
// rank as the dist.zero3_nccl suites (tests/CMakeLists.txt) run it.
#include "common/autocast.h"
#include "common/error.h"
#include "dist/ddp/ddp.h"
#include "dist/zero/zero.h"
#include "dist/zero/zero2.h"
#include "dist/zero/flat_storage.h"
#include "dist/zero/zero3.h"

#include "equivalence.h"

#include <catch2/catch.hpp>

#include <algorithm>
#include <iostream>
#include <numeric>

using dtrain::dist::NamedTensors;
using dtrain::dist::Zero3Strategy;
using Catch::Matchers::Contains;
using namespace equivalence;

namespace {

dtrain::dist::ZeroOptions stage3(int64_t prefetch = 1) {
  dtrain::dist::ZeroOptions options;
  options.stage = 3;
  options.prefetch = prefetch;
  return options;
}

enum class Kind { kDdp, kZero1, kZero2, kZero3 };

const char* name_of(Kind kind) {
  switch (kind) {
    case Kind::kDdp: return "ddp";
    case Kind::kZero1: return "zero stage 1";
    case Kind::kZero2: return "zero stage 2";
    case Kind::kZero3: return "zero stage 3";
  }
  return "";
}

std::unique_ptr<dtrain::dist::Strategy> make_strategy(
    Kind kind, std::shared_ptr<dtrain::dist::Communicator> comm = world()) {
  dtrain::dist::ZeroOptions zero;
  switch (kind) {
    case Kind::kZero3: return std::make_unique<Zero3Strategy>(stage3(), std::move(comm));
    case Kind::kZero2:
      zero.stage = 2;
      return std::make_unique<dtrain::dist::Zero2Strategy>(zero, std::move(comm));
    case Kind::kZero1: return std::make_unique<dtrain::dist::ZeroStrategy>(std::move(comm));
    case Kind::kDdp: break;
  }
  return std::make_unique<dtrain::dist::DdpStrategy>(dtrain::dist::DdpOptions{}, std::move(comm));
}

// Queues about 20 ms of work on the current stream (products of 2048 x 2048 matrices, a few
// times what the host needs to issue a step of the test net) and returns at once: whatever
// is issued next, on this stream and on the NCCL stream after it, runs that much later.
void keep_device_busy() {
  const auto options = torch::dtype(torch::kFloat32).device(device());
  torch::Tensor product = torch::ones({2048, 2048}, options);
  const torch::Tensor identity = torch::eye(2048, options);
  for (int i = 0; i < 40; ++i) product = torch::mm(product, identity);
}

// A moment `ms` milliseconds into the step, and an operation between two of them.
struct At : dtrain::dist::TimePoint {
  explicit At(double at) : ms(at) {}
  double ms_until(const TimePoint& later) const override {
    return static_cast<const At&>(later).ms - ms;
  }
  double ms;
};
std::shared_ptr<const At> moment(double ms) { return std::make_shared<At>(ms); }

struct Ran : dtrain::dist::Work {
  Ran(double from, double to) : start(moment(from)), end(moment(to)) {}
  void wait() override {}
  bool test() override { return true; }
  std::shared_ptr<const dtrain::dist::TimePoint> started() const override { return start; }
  std::shared_ptr<const dtrain::dist::TimePoint> finished() const override { return end; }
  int source() const override { return 0; }
  std::shared_ptr<const At> start, end;
};

}  // namespace

TEST_CASE("A prefetched gather is exposed only from the wait for it on", "[dist][zero]") {
  using dtrain::dist::Collective;
  dtrain::dist::StepComm record(0, 2);
  record.add_prefetched(Collective::kAllGather, 1024, std::make_unique<Ran>(0, 10), moment(4));
  record.add_prefetched(Collective::kAllGather, 1024, std::make_unique<Ran>(10, 12),
                        moment(15));
  record.add(Collective::kAllGather, dtrain::dist::Traffic::kParameters, 1024,
             std::make_unique<Ran>(20, 23));
  // The wait began before the transfer did (a busy progress thread): exposed at most whole.
  record.add_prefetched(Collective::kAllGather, 1024, std::make_unique<Ran>(30, 32),
                        moment(25));
  const dtrain::dist::Stats stats = record.stats();
  CHECK(stat(stats, "comm/ms") == 17.0);
  // Waited 6 of 10; done; blocking 3; 2 of 2.
  CHECK(stat(stats, "comm/exposed_ms") == 6.0 + 0.0 + 3.0 + 2.0);
  CHECK(stat(stats, "comm/bytes") == 4 * 1024.0);
}

TEST_CASE("Gradient traffic after backward is exposed only while it is in flight",
          "[dist][zero]") {
  using dtrain::dist::Collective;
  using dtrain::dist::Traffic;
  dtrain::dist::StepComm record(0, 2);
  record.set_backward_end(moment(10));
  record.add(Collective::kAllReduce, Traffic::kGradients, 1024, std::make_unique<Ran>(2, 8));
  record.add(Collective::kAllReduce, Traffic::kGradients, 1024, std::make_unique<Ran>(6, 13));
  record.add(Collective::kAllReduce, Traffic::kGradients, 1024, std::make_unique<Ran>(12, 14));
  // Launched after a gap in which nothing was in flight (the host busy elsewhere).
  record.add(Collective::kAllReduce, Traffic::kGradients, 1024, std::make_unique<Ran>(20, 21));
  const dtrain::dist::Stats stats = record.stats();
  // In flight from 2 to 14 and from 20 to 21, not 6 + 7 + 2 + 1.
  CHECK(stat(stats, "comm/ms") == 12.0 + 1.0);
  // Hidden behind backward; 10 to 14 once, not 3 + 2; 1 of the last, not the gap before it.
  CHECK(stat(stats, "comm/exposed_ms") == 0.0 + 4.0 + 1.0);
}

TEST_CASE("Operations in flight together count once in the time and the bandwidth",
          "[dist][zero]") {
  // DDP without overlap: 5 buckets launched together after backward, each in flight for most
  // of the 20 ms they took together (summed, 77.5 ms against 19.7 spent).
  using dtrain::dist::Collective;
  using dtrain::dist::Traffic;
  dtrain::dist::StepComm record(0, 2, moment(0));
  record.set_backward_end(moment(10));
  for (int b = 0; b < 5; ++b) {
    record.add(Collective::kAllReduce, Traffic::kGradients, 1000,
               std::make_unique<Ran>(10 + b, 30));
  }
  // A buffer broadcast beside a blocking gather, and a wait that overlaps the gather.
  record.add(Collective::kBroadcast, Traffic::kSmall, 8, std::make_unique<Ran>(40, 42));
  record.add(Collective::kAllGather, Traffic::kParameters, 1000, std::make_unique<Ran>(41, 45));
  record.add_wait(moment(44), moment(50));
  const dtrain::dist::Stats stats = record.stats();
  CHECK(stat(stats, "comm/ms") == 20.0 + 10.0);
  CHECK(stat(stats, "comm/exposed_ms") == 20.0 + 10.0);
  // nccl-tests' busbw: the bulk traffic's bytes x factor over the time it was in flight
  // (10 to 30, 41 to 45), the small broadcast and the wait left out.
  CHECK(stat(stats, "comm/busbw_gbps") == Approx((5 * 1000.0 + 1000.0 / 2) / 24e-3 / 1e9));
}

TEST_CASE("Pipelined operations count within their step, and only its waits are exposed",
          "[dist][ps]") {
  // The parameter server over collectives: reduces and broadcasts issued a step or two before
  // the one that completes them, in flight behind its compute. Timed whole (a 264 ms step on
  // 3 ranks with a straggler) they summed to 5338 ms, 3518 ms of it exposed.
  using dtrain::dist::Collective;
  using dtrain::dist::Traffic;
  dtrain::dist::StepComm record(0, 2, moment(100));  // the step runs from 100 to 200
  record.set_backward_end(moment(170));
  record.add_pipelined(Collective::kReduce, Traffic::kGradients, 1024,
                       std::make_unique<Ran>(20, 130));
  record.add_pipelined(Collective::kBroadcast, Traffic::kParameters, 1024,
                       std::make_unique<Ran>(90, 140));
  record.add_pipelined(Collective::kBroadcast, Traffic::kParameters, 1024,
                       std::make_unique<Ran>(150, 190));
  record.add_pipelined(Collective::kBroadcast, Traffic::kParameters, 1024,
                       std::make_unique<Ran>(40, 60));  // done before the step began
  record.add_wait(moment(120), moment(125));
  record.add_wait(moment(180), moment(190));
  const dtrain::dist::Stats stats = record.stats();
  // 100 to 140 once and 150 to 190, not 110 + 50 + 40 + 20.
  CHECK(stat(stats, "comm/ms") == 40.0 + 40.0);
  CHECK(stat(stats, "comm/exposed_ms") == 5.0 + 10.0);
  CHECK(stat(stats, "comm/bytes") == 4 * 1024.0);
  CHECK(stat(stats, "comm/busbw_gbps") == 4 * 1024.0 / 80e-3 / 1e9);
}

TEST_CASE("A flat buffer's memory comes and goes under every tensor on it", "[dist][zero]") {
  // A parameter moved into the flat buffer, and a view autograd would save in forward
  // (Linear's weight.t()), see the values written after the memory was freed and given back,
  // on this rank's device even where another is current (on GPUs every rank's current device
  // here is the first: the tests never select theirs).
  const auto options = torch::dtype(torch::kFloat64).device(device());
  torch::Tensor flat = torch::zeros({8}, options);
  torch::Tensor param = torch::ones({2, 3}, options);
  dtrain::dist::move_into_flat(param, flat, 1);
  const torch::Tensor transposed = param.t();
  dtrain::dist::free_storage(flat);
  CHECK(param.storage().nbytes() == 0);
  CHECK(transposed.storage().nbytes() == 0);
  dtrain::dist::allocate_storage(flat);
  CHECK(flat.storage().data_ptr().device() == device());
  flat.copy_(torch::arange(8, options));
  CHECK(torch::equal(param, torch::arange(1, 7, options).view({2, 3})));
  CHECK(torch::equal(transposed, param.t()));
  CHECK(param.storage().nbytes() == 8 * 8);
}

TEST_CASE("ZeRO-3 on N ranks equals DDP and one rank on the N-times batch", "[dist][zero]") {
  const std::string name = GENERATE("sgd", "adamw", "lars", "lamb");
  const int64_t micro = GENERATE(1, 2);
  const int64_t prefetch = GENERATE(0, 1, 3);
  INFO("optimizer " << name << ", " << micro << " micro-steps, prefetch " << prefetch);
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);

  Net ddp_net = make_net();
  dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
  ddp.attach(*ddp_net, factory(options));
  train(ddp_net, ddp, data, 0, kSteps, options.lr, micro);

  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  Zero3Strategy strategy(stage3(prefetch), world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr, micro);
  const NamedTensors state = strategy.model_state();
  const double from_ddp = max_difference(state, *ddp_net);
  CHECK(from_ddp < kTolerance);
  CHECK(max_difference(state, *reference) < kTolerance);
  if (world()->rank() == 0 && prefetch == 1) {
    std::cout << "zero stage 3 vs ddp, np" << world()->size() << ", " << name << ", micro "
              << micro << ": max |difference| " << from_ddp << "\n";
  }

  // Whole units: the one running and `prefetch` ahead of it, never more; none between steps,
  // when every parameter's storage holds no memory.
  const auto& plan = strategy.plan();
  const int64_t units = static_cast<int64_t>(plan.layout.size());
  CHECK(strategy.max_whole_units() == std::min(prefetch + 1, units));
  CHECK(strategy.whole_units() == 0);
  for (const torch::Tensor& param : net->parameters()) CHECK(param.storage().nbytes() == 0);

  // The last step's communication, per micro-step and unit: an all-gather before its forward
  // and before its backward, a reduce-scatter after it, each of the padded unit; the last unit
  // (the head) stays whole from its forward to its backward.
  int64_t padded = 0;
  for (const auto& unit : plan.layout) padded += unit.numel;
  const int64_t head = plan.layout.back().numel;
  const dtrain::dist::Stats stats = strategy.stats();
  CHECK(stat(stats, "comm/collectives") == static_cast<double>((3 * units - 1) * micro));
  CHECK(stat(stats, "comm/bytes") == static_cast<double>((3 * padded - head) * 8 * micro));
  CHECK(stat(stats, "memory/max_whole_units") ==
        static_cast<double>(std::min(prefetch + 1, units)));
  CHECK(stat(stats, "comm/exposed_ms") <= stat(stats, "comm/ms") + 1e-9);
  // Memory held between steps: 1/N of the padded parameters and of the gradients; the padding
  // is under one element per rank and unit.
  const int64_t n = world()->size(), shard = padded / n;
  int64_t total = 0;
  for (const torch::Tensor& param : reference->parameters()) total += param.numel();
  CHECK(padded - total < units * n);
  CHECK(stat(stats, "memory/parameters_mb") * (1 << 20) == static_cast<double>(shard * 8));
  CHECK(stat(stats, "memory/gradients_mb") * (1 << 20) == static_cast<double>(shard * 8));
}

TEST_CASE("ZeRO-3 on GPUs equals one rank while the host runs ahead of the device",
          "[dist][zero]") {
  // Over NCCL nothing in a step blocks the host: a unit's memory is freed, and handed out again,
  // while the kernels that read it and the gather that writes it are still queued. Here the
  // device starts every forward and backward behind a queue of busy work, so the host issues
  // the whole step before the device reaches it: a use of memory that streams do not order
  // shows as a difference from the reference.
  if (!device().is_cuda()) return;  // on MPI every wait holds the host: nothing runs ahead
  const std::string name = GENERATE("sgd", "adamw");
  const int64_t prefetch = GENERATE(0, 1, 3);
  INFO("optimizer " << name << ", prefetch " << prefetch);
  const auto options = optimizer_options(name);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);

  Net net = make_net(static_cast<uint64_t>(world()->rank()));
  Zero3Strategy strategy(stage3(prefetch), world());
  strategy.attach(*net, factory(options));
  const int64_t micro = 2, per_micro = kPerRank / micro;  // a later micro-step adds its shard
  for (int64_t step = 0; step < kSteps; ++step) {
    keep_device_busy();
    strategy.before_forward(step);
    for (int64_t m = 0; m < micro; ++m) {
      const int64_t begin = world()->rank() * kPerRank + m * per_micro;
      strategy.before_backward(m + 1 == micro);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(
          net->forward(data.x[step].narrow(0, begin, per_micro)),
          data.y[step].narrow(0, begin, per_micro));
      keep_device_busy();
      (loss / static_cast<double>(micro)).backward();
      strategy.after_backward(m + 1 == micro);
    }
    strategy.step(options.lr);
  }
  CHECK(max_difference(strategy.model_state(), *reference) < kTolerance);
}

// Autocast on the test's device, computing in `dtype`, for the scope's life.
struct Autocast {
  explicit Autocast(at::ScalarType dtype) : type(device().type()) {
    dtrain::set_autocast(type, true, dtype);
  }
  ~Autocast() {
    dtrain::set_autocast(type, false, torch::kBFloat16);
    at::autocast::clear_cache();
  }
  c10::DeviceType type;
};

TEST_CASE("ZeRO-3 gathers in autocast's dtype: forwards see the weights rounded to it, the "
          "optimizer steps the unrounded ones", "[dist][zero]") {
  // Float64 nets: autocast casts only float32, so what rounds here is the gather alone.
  const auto options = optimizer_options("lamb");
  const Data data = make_data(world()->size());
  // One process: each step's gradient taken at the weights rounded to bf16, applied to the
  // unrounded ones.
  Net reference = make_net();
  Net reader = make_net();
  auto optimizer = dtrain::optim::make_optimizer(options, reference->parameters());
  for (int64_t step = 0; step < kSteps; ++step) {
    auto params = reference->parameters(), reader_params = reader->parameters();
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        reader_params[i].copy_(params[i].to(torch::kBFloat16));
      }
    }
    reader->zero_grad();
    torch::nn::functional::cross_entropy(reader->forward(data.x[step]), data.y[step]).backward();
    for (size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = reader_params[i].grad();
    optimizer->step();
  }
  Net unrounded = train_reference(data, options);
  REQUIRE(max_difference(*reference, *unrounded) > 1e-6);  // the rounding shows

  double bytes[2] = {0.0, 0.0};
  for (const std::string gather : {"compute", "param"}) {
    INFO("dist.zero.gather_dtype = " << gather);
    auto zero = stage3();
    zero.gather_dtype = gather;
    Net net = make_net();
    Zero3Strategy strategy(zero, world());
    strategy.attach(*net, factory(options));
    {
      Autocast autocast(torch::kBFloat16);
      train(net, strategy, data, 0, kSteps, options.lr);
    }
    bytes[gather == "param"] = stat(strategy.stats(), "comm/bytes");
    CHECK(max_difference(strategy.model_state(), gather == "param" ? *unrounded : *reference) <
          kTolerance);
  }
  // A bf16 gather moves a quarter of a float64 one; the reduce-scatters stay float64.
  CHECK(bytes[0] < 0.75 * bytes[1]);
}

TEST_CASE("ZeRO-3 evaluates without grad mode, gathering each unit around its forward",
          "[dist][zero]") {
  const auto options = optimizer_options("adamw");
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, options);
  Net net = make_net();
  Zero3Strategy strategy(stage3(), world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr);
  torch::NoGradGuard no_grad;
  strategy.before_eval();
  const torch::Tensor logits = net->forward(data.x[0]);
  CHECK((logits - reference->forward(data.x[0])).abs().max().item<double>() < kTolerance);
  CHECK(strategy.whole_units() == 0);
  CHECK(strategy.max_whole_units() <= 2);
}

TEST_CASE("ZeRO-3 steps a unit parameter without gradient as a zero gradient", "[dist][zero]") {
  // The unused layer is a unit that never runs: never gathered, reduce-scattered as zeros.
  // As in DDP's test with find_unused: no weight decay, which alone would tell a skipped
  // parameter from one stepped with a zero gradient.
  const NetOptions with_unused{true, false};
  auto sgd = optimizer_options("sgd");
  sgd.weight_decay = 0.0;
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, sgd, with_unused);
  Net net = make_net(0, with_unused);
  Zero3Strategy strategy(stage3(), world());
  strategy.attach(*net, factory(sgd));
  train(net, strategy, data, 0, kSteps, sgd.lr, 2);
  CHECK(max_difference(strategy.model_state(), *reference) < kTolerance);
  CHECK(strategy.max_whole_units() <= 2);
}

TEST_CASE("ZeRO-3's start-up line counts the units whole at once as min(prefetch + 1, units)",
          "[dist][zero]") {
  const int64_t mib = 1 << 20;
  CHECK_THAT(dtrain::dist::stage3_plan_line(4, 3, mib, 3 * mib, 1024),
             Contains("4 units, each cut into 3 shards; each rank holds 1.000 of the 3.000 MiB "
                      "of parameters, with at most 4 units whole at once"));
  CHECK_THAT(dtrain::dist::stage3_plan_line(4, 2, mib, 2 * mib, 2),
             Contains("with at most 3 units whole at once"));
  CHECK_THAT(dtrain::dist::stage3_plan_line(1, 1, mib, mib, 0),
             Contains("1 unit, each cut into 1 shard;") &&
                 Contains("with at most 1 unit whole at once"));
}

TEST_CASE("ZeRO-3 needs a model made of units", "[dist][zero]") {
  torch::nn::Linear plain(3, 2);
  plain->to(device(), torch::kFloat64);
  Zero3Strategy strategy(stage3(), world());
  CHECK_THROWS_WITH(strategy.attach(*plain, factory(optimizer_options("sgd"))),
                    Contains("dtrain::UnitModule"));
}

TEST_CASE("ZeRO-3 resumes from and into stage 1, stage 2 and DDP on another number of ranks",
          "[dist][zero]") {
  // Steps 0-1 under the first strategy on the first min(2, N) ranks (global batch 2b),
  // checkpoint, steps 2-3 under the second on all N ranks (global batch Nb): the same as one
  // rank taking those two batch sizes.
  const auto [first_kind, second_kind] = GENERATE(table<Kind, Kind>(
      {{Kind::kZero3, Kind::kZero3}, {Kind::kZero3, Kind::kZero2}, {Kind::kZero2, Kind::kZero3},
       {Kind::kZero3, Kind::kDdp}, {Kind::kDdp, Kind::kZero3}, {Kind::kZero1, Kind::kZero3},
       {Kind::kZero3, Kind::kZero1}}));
  INFO(name_of(first_kind) << ", then " << name_of(second_kind));
  const auto options = optimizer_options("lamb");
  const int64_t n = world()->size(), writers = std::min<int64_t>(2, n);
  const Data data = make_data(n);
  Net reference = train_reference_resumed(data, options, writers, n);

  const std::string dir = fresh_directory("zero3_reshard_test");
  const bool writer = world()->rank() < writers;
  std::shared_ptr<dtrain::dist::Communicator> group =
      world()->split(writer ? 0 : 1, world()->rank());
  Net trained = make_net();
  if (writer) {
    Net net = make_net();
    auto before = make_strategy(first_kind, group);
    before->attach(*net, factory(options));
    train(net, *before, data, 0, 2, options.lr, 1, group->rank());
    trained = net_from(before->model_state());
    write_checkpoint(*before, dir, *group);
  }
  // Every rank loads after the writers saved (a world barrier, which blocks the host on NCCL
  // too). attach() then gives every rank rank 0's weights, the writers'.
  world()->barrier();
  auto after = make_strategy(second_kind);
  after->attach(*trained, factory(options));
  after->load(dir);
  train(trained, *after, data, 2, kSteps, options.lr);
  CHECK(max_difference(after->model_state(), *reference) < kTolerance);
}

TEST_CASE("ZeRO-3 with BatchNorm equals DDP, buffers broadcast from rank 0", "[dist][zero]") {
  // Each rank normalises with its own batch's statistics, under both strategies; the running
  // statistics are rank 0's before every forward. The norm unit has parameters and buffers.
  // SGD: body.bias's gradient is zero but for rounding (BatchNorm subtracts the mean), which
  // Adam's, LARS's and LAMB's normalisations would blow up into different steps.
  const NetOptions with_norm{false, true};
  const auto options = optimizer_options("sgd");
  const Data data = make_data(world()->size());
  Net ddp_net = make_net(0, with_norm);
  dtrain::dist::DdpStrategy ddp(dtrain::dist::DdpOptions{}, world());
  ddp.attach(*ddp_net, factory(options));
  train(ddp_net, ddp, data, 0, kSteps, options.lr, 2);

  Net net = make_net(static_cast<uint64_t>(world()->rank()), with_norm);
  Zero3Strategy strategy(stage3(), world());
  strategy.attach(*net, factory(options));
  train(net, strategy, data, 0, kSteps, options.lr, 2);
  const NamedTensors state = strategy.model_state();
  const NamedTensors expected = dtrain::dist::module_state(*ddp_net);
  REQUIRE(state.size() == expected.size());
  for (size_t i = 0; i < state.size(); ++i) {
    INFO(state[i].first);
    CHECK(state[i].first == expected[i].first);
    CHECK((state[i].second.to(torch::kFloat64) - expected[i].second.to(torch::kFloat64))
              .abs()
              .max()
              .item<double>() < kTolerance);
  }
}

TEST_CASE("ZeRO-3's consolidated state loads back into the shards", "[dist][zero]") {
  // What a resume through the trainer does: model_state(), overwritten from model.pt, handed
  // to load_model_state(); every rank then holds its shard of the loaded values.
  Net net = make_net(0, {false, true});
  Zero3Strategy strategy(stage3(), world());
  strategy.attach(*net, factory(optimizer_options("sgd")));
  NamedTensors state = strategy.model_state();
  for (auto& item : state) {
    if (item.second.is_floating_point()) item.second = item.second + 1.0;
  }
  strategy.load_model_state(state);
  const NamedTensors loaded = strategy.model_state();
  REQUIRE(loaded.size() == state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    CHECK(loaded[i].first == state[i].first);
    CHECK(torch::equal(loaded[i].second, state[i].second));
  }
}
