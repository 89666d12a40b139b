#include "trainer/memory_plan.h"

#include "common/error.h"
#include "common/log.h"
#include "data/dataset.h"
#include "dist/factory.h"
#include "dist/memory_model.h"
#include "dist/placement.h"
#include "dist/ps/plan.h"
#include "dist/zero/zero3.h"
#include "models/registry.h"
#include "optim/schedule.h"
#include "optim/state_bytes.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>

namespace dtrain::trainer {

namespace {

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

// The ZeRO paper's stage for a strategy's prediction: 0 for ddp, -1 where it has none.
int paper_stage(const std::string& strategy) {
  if (strategy == "ddp" || strategy == "single") return 0;
  if (strategy.rfind("zero stage ", 0) == 0) return strategy.back() - '0';
  return -1;
}

nlohmann::json ranks_json(const std::vector<dist::ModelStateBytes>& ranks) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t r = 0; r < ranks.size(); ++r) {
    const dist::ModelStateBytes& b = ranks[r];
    list.push_back({{"rank", r},
                    {"parameters_mb", mib(b.parameters)},
                    {"gradients_mb", mib(b.gradients)},
                    {"optimizer_state_mb", mib(b.optimizer_state)},
                    {"total_mb", mib(b.total())},
                    {"host_mb", mib(b.host)},
                    {"codec_state_mb", mib(b.codec_state)},
                    {"ssp_slots_mb", mib(b.ssp_slots)},
                    {"parameters_bytes", b.parameters},
                    {"gradients_bytes", b.gradients},
                    {"optimizer_state_bytes", b.optimizer_state},
                    {"host_bytes", b.host},
                    {"codec_state_bytes", b.codec_state},
                    {"ssp_slots_bytes", b.ssp_slots}});
  }
  return list;
}

// The configured strategy, a row per run of ranks that hold the same; a column of the codec's
// state where there is a codec, and of the bytes in host memory beside GPU workers where some
// are (a parameter server's).
std::string rank_table(const dist::MemoryPrediction& prediction) {
  const std::vector<dist::ModelStateBytes>& ranks = prediction.ranks;
  const auto any = [&ranks](int64_t dist::ModelStateBytes::*field) {
    return std::any_of(ranks.begin(), ranks.end(),
                       [field](const dist::ModelStateBytes& b) { return b.*field > 0; });
  };
  const bool any_codec = any(&dist::ModelStateBytes::codec_state);
  const bool any_slots = any(&dist::ModelStateBytes::ssp_slots);
  const bool any_host = any(&dist::ModelStateBytes::host);
  const auto column = [](bool shown, const std::string& text) {
    return shown ? fmt::format(" {:>12}", text) : std::string();
  };
  const auto row = [&](const std::string& name, const dist::ModelStateBytes& b) {
    return fmt::format("  {:<10} {:>12.3f} {:>12.3f} {:>12.3f}{}{} {:>12.3f}{}\n", name,
                       mib(b.parameters), mib(b.gradients), mib(b.optimizer_state),
                       column(any_codec, fmt::format("{:.3f}", mib(b.codec_state))),
                       column(any_slots, fmt::format("{:.3f}", mib(b.ssp_slots))),
                       mib(b.total()), column(any_host, fmt::format("{:.3f}", mib(b.host))));
  };
  std::string text = fmt::format("  {:<10} {:>12} {:>12} {:>12}{}{} {:>12}{}\n", "rank",
                                 "parameters", "gradients", "optimizer",
                                 column(any_codec, "codec state"), column(any_slots, "ps slots"),
                                 "total", column(any_host, "of it host"));
  const auto same = [](const dist::ModelStateBytes& a, const dist::ModelStateBytes& b) {
    return a.parameters == b.parameters && a.gradients == b.gradients &&
           a.optimizer_state == b.optimizer_state && a.host == b.host &&
           a.codec_state == b.codec_state && a.ssp_slots == b.ssp_slots;
  };
  dist::ModelStateBytes sum;
  for (size_t first = 0; first < ranks.size();) {
    size_t last = first;
    while (last + 1 < ranks.size() && same(ranks[last + 1], ranks[first])) ++last;
    text += row(first == last ? fmt::format("{}", first) : fmt::format("{}-{}", first, last),
                ranks[first]);
    first = last + 1;
  }
  for (const dist::ModelStateBytes& b : ranks) {
    sum.parameters += b.parameters;
    sum.gradients += b.gradients;
    sum.optimizer_state += b.optimizer_state;
    sum.host += b.host;
    sum.codec_state += b.codec_state;
    sum.ssp_slots += b.ssp_slots;
  }
  text += row("all ranks", sum);
  return text;
}

// Every strategy side by side, rank 0's figures and the most any rank holds, with the paper's
// total; each strategy's prediction is appended to `strategies` too.
std::string comparison_table(const dist::DistOptions& options,
                             const dist::ModelStateInput& input, int world_size,
                             nlohmann::json& strategies) {
  int64_t numel = 0;
  for (const torch::Tensor& param : input.params) numel += param.numel();
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  std::string text;
  text += fmt::format("every strategy at {} rank(s), MiB (rank 0; the most on one rank; the ZeRO "
                      "paper's {} + {} + {} bytes per parameter, sharded by stage){}:\n",
                      world_size, element_size, element_size, input.state_tensors * element_size,
                      options.compression.enabled()
                          ? fmt::format("; totals include the state of codec {} where it runs",
                                        options.compression.kind)
                          : "");
  text += fmt::format("  {:<22} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}\n", "strategy",
                      "parameters", "gradients", "optimizer", "total", "most", "paper");
  for (const dist::MemoryPrediction& each : dist::predict_every_strategy(options, input,
                                                                         world_size)) {
    // The paper has no figure for a parameter server: "-" in the table, null in the JSON.
    const int stage = paper_stage(each.strategy);
    const double paper =
        stage < 0 ? 0.0
                  : mib(dist::paper_bytes(numel, element_size, input.state_tensors, stage,
                                          world_size).total());
    const std::string paper_text = stage < 0 ? "-" : fmt::format("{:.3f}", paper);
    strategies.push_back({{"strategy", each.strategy},
                          {"ranks", ranks_json(each.ranks)},
                          {"problem", each.problem},
                          {"reports_parameters_and_gradients",
                           each.reports_parameters_and_gradients},
                          {"paper_total_mb",
                           stage < 0 ? nlohmann::json() : nlohmann::json(paper)}});
    if (!each.problem.empty()) {
      text += fmt::format("  {:<22} {}\n", each.strategy, each.problem);
      continue;
    }
    int64_t most = 0;
    for (const dist::ModelStateBytes& b : each.ranks) most = std::max(most, b.total());
    const dist::ModelStateBytes& first = each.ranks.front();
    text += fmt::format("  {:<22} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11.3f} {:>11}\n",
                        each.strategy, mib(first.parameters), mib(first.gradients),
                        mib(first.optimizer_state), mib(first.total()), mib(most), paper_text);
  }
  return text;
}

}  // namespace

int parse_world_size(const std::string& text) {
  const bool digits = !text.empty() && text.size() <= 7 &&
                      std::all_of(text.begin(), text.end(),
                                  [](unsigned char c) { return std::isdigit(c) != 0; });
  const int value = digits ? std::stoi(text) : 0;
  if (value < 1) {
    throw UserError(fmt::format("--world-size \"{}\": give the number of ranks to predict "
                                "for, a whole number from 1 to 9999999, e.g. --world-size 8",
                                text));
  }
  return value;
}

namespace {

struct PlanModel {
  std::shared_ptr<models::Model> model;
  int64_t train_samples = 0;
};

PlanModel plan_model(const Config& config) {
  // The sizes depend on the data's sample shape and classes only; the device and the weights'
  // values do not matter.
  const data::Splits splits = data::open_splits(config.data);
  const data::SampleShape shape = splits.train->shape();
  return {models::make_model(config.model, {shape.channels, shape.height, shape.width},
                             splits.train->num_classes()),
          splits.train->size()};
}

// What the start-up would say of a world of `world_size` ranks that --world-size only
// imagines: the strategy, the global batch over the ranks that take data, and the
// parameter server's plan of chunks on servers.
std::string describe_world(const Config& config, const dist::ModelStateInput& input,
                           const std::vector<std::string>& names, int world_size,
                           int64_t train_samples) {
  const int data_ranks = dist::place_ranks(config.dist, world_size).num_device_ranks;
  const int64_t global_batch = data_ranks * config.data.batch_size * config.train.grad_accum;
  const int64_t steps_per_epoch = train_samples / global_batch;
  if (steps_per_epoch == 0) {
    throw UserError(fmt::format("--dry-run: global batch {} at {} rank(s) exceeds the {} "
                                "training samples; use a smaller data.batch_size",
                                global_batch, world_size, train_samples));
  }
  // As the run's start-up warns: a run of whole epochs that never ends its warmup.
  if (config.train.max_steps == 0) {
    const optim::LrSchedule schedule(config.schedule, config.optim.lr, steps_per_epoch,
                                     config.train.epochs * steps_per_epoch);
    for (const std::string& line : schedule.unreached()) log::warn("{}", line);
  }
  std::string text = fmt::format(
      "{} rank(s), as planned (none started) | strategy {}\n"
      "global batch {} ({} rank(s) x {} x {} micro-steps) | {} steps/epoch\n",
      world_size, dist::describe_strategy(config.dist), global_batch, data_ranks,
      config.data.batch_size, config.train.grad_accum, steps_per_epoch);
  if (config.dist.strategy == dist::StrategyKind::kPs) {
    const dist::PsOptions& ps = config.dist.ps;
    const int servers = ps.placement == "dedicated" ? static_cast<int>(ps.servers) : world_size;
    // As ps.cpp plans it: async servers keep tensors whole.
    const dist::PsPlan plan =
        dist::make_ps_plan(input.params, servers, ps.chunk_mb, ps.consistency == "async");
    const int64_t element_size = input.params.front().element_size();
    text += plan.summary(names, element_size);
    const std::string uneven = dist::uneven_plan_warning(plan, ps.chunk_mb, element_size);
    if (!uneven.empty()) log::warn("{}", uneven);
    const int64_t total_steps = config.train.max_steps > 0 ? config.train.max_steps
                                                           : config.train.epochs * steps_per_epoch;
    for (const std::string& line : ps.run_warnings(data_ranks, total_steps)) log::warn("{}", line);
  }
  return text;
}

}  // namespace

void report_memory_plan(const Config& config, int world_size, const std::string& json_path,
                        bool imagined_world) {
  const PlanModel planned = plan_model(config);
  const std::shared_ptr<models::Model>& model = planned.model;
  dist::ModelStateInput input;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    input.params.push_back(item.value());
    names.push_back(item.key());
  }
  try {
    input.units = dist::parameters_by_unit(*model, input.params, names);
  } catch (const UserError&) {
    // A parameter of no unit: stage 3's prediction says it cannot run.
  }
  input.state_tensors = optim::state_tensors_per_parameter(config.optim);
  input.on_gpus = config.run.device == "cuda" ||
                  (config.run.device == "auto" && torch::cuda::is_available());
  const dist::MemoryPrediction configured =
      dist::predict_model_state(config.dist, input, world_size);
  if (!configured.problem.empty()) {
    throw UserError(fmt::format("--dry-run: {} at {} rank(s): {}", configured.strategy,
                                world_size, configured.problem));
  }
  std::string text = imagined_world ? describe_world(config, input, names, world_size,
                                                    planned.train_samples)
                                     : std::string();
  text += fmt::format("model-state memory per rank (MiB) predicted for {} rank(s), "
                                 "{}, optimizer {} ({} state tensor(s) per parameter){}:\n",
                                 world_size, configured.strategy, config.optim.name,
                                 input.state_tensors,
                                 configured.reports_parameters_and_gradients
                                     ? ""
                                     : "; its metrics report the optimizer state only");
  text += rank_table(configured);
  const dist::RankPlacement placement = dist::place_ranks(config.dist, world_size);
  if (placement.num_device_ranks < world_size) {
    const int first = placement.num_device_ranks;
    text += first == world_size - 1
                ? fmt::format("  rank {} takes no data and runs on the CPU: all of its memory is "
                              "host memory, whatever run.device\n",
                              first)
                : fmt::format("  ranks {}-{} take no data and run on the CPU: all of theirs is "
                              "in host memory, whatever run.device\n",
                              first, world_size - 1);
  }
  nlohmann::json strategies = nlohmann::json::array();
  text += comparison_table(config.dist, input, world_size, strategies);
  text.pop_back();
  log::info("{}", text);

  if (json_path.empty()) return;
  const nlohmann::json report = {{"world_size", world_size},
                                 {"strategy", configured.strategy},
                                 {"optimizer", config.optim.name},
                                 {"state_tensors", input.state_tensors},
                                 {"ranks", ranks_json(configured.ranks)},
                                 {"strategies", strategies}};
  std::ofstream out(json_path);
  out << report.dump(2) << '\n';
  if (!out) {
    throw UserError(
        fmt::format("--dry-run-json {}: cannot write: {}", json_path, std::strerror(errno)));
  }
}

}  // namespace dtrain::trainer
