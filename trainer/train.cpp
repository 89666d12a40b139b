#include "trainer/train.h"

#include "common/error.h"
#include "common/host_wait.h"
#include "common/log.h"
#include "dist/comm/communicator.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/factory.h"
#include "trainer/checkpoint.h"
#include "trainer/config.h"
#include "trainer/graphed_step.h"
#include "trainer/input_meter.h"
#include "trainer/memory_plan.h"
#include "trainer/memory_stats.h"
#include "trainer/metrics.h"
#include "trainer/precision.h"
#include "trainer/profiler.h"
#include "trainer/progress.h"
#include "trainer/resume.h"
#include "trainer/run_dir.h"
#include "trainer/timeline.h"
#include "trainer/setup.h"
#include "trainer/signals.h"
#include "trainer/straggler.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

namespace dtrain::trainer {

namespace {

using Clock = std::chrono::steady_clock;

// Set during static initialisation, before main: the eval records' wall time counts start-up
// (reading the dataset, building the model) as a time to an accuracy must.
const Clock::time_point process_start = Clock::now();

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct EvalResult {
  double loss = std::numeric_limits<double>::quiet_NaN();
  double accuracy = std::numeric_limits<double>::quiet_NaN();
};

// What to try after a divergence: fp32 only where the run is not in it already.
std::string diverged_hint(const Config& config) {
  return std::string("lower optim.lr or add warmup (schedule.warmup_epochs)") +
         (config.train.precision == "fp32" ? "" : ", or use train.precision = \"fp32\"");
}

// "NaN" or "Inf" (fmt writes a NaN of either sign, as "-nan" and "nan").
std::string nonfinite_name(double value) {
  return std::isnan(value) ? "NaN" : value > 0 ? "Inf" : "-Inf";
}

class Trainer {
 public:
  Trainer(const Config& config, RunSetup setup)
      : config_(config),
        skip_nonfinite_(config.train.nonfinite == "skip"),
        s_(std::move(setup)),
        checkpointer_(s_.run_dir + "/checkpoints", config.train.keep_checkpoints),
        // Every rank holds the same model and the same reduced metrics: rank 0 reports them.
        metrics_(s_.world.rank == 0 ? s_.run_dir + "/metrics.jsonl" : ""),
        progress_(s_.world.rank == 0),
        profiler_(config.run.profile_start, config.run.profile_steps,
                  fmt::format("{}/trace.rank{}.json", s_.run_dir, s_.world.rank)),
        timeline_(config.run.trace, s_.run_dir, s_.world.rank),
        straggler_(config.debug, s_.world.rank, s_.device),
        report_(torch::zeros({4}, torch::dtype(torch::kFloat32).device(s_.device))),
        loss_sum_(report_[0]),
        step_loss_(torch::zeros({}, report_.options())),
        session_start_(Clock::now()) {
    if (config.train.precision == "fp16") scaler_.emplace(s_.device);
    if (s_.device.is_cuda() && config.train.cuda_graph != "off" &&
        cuda_graph_blockers(config).empty()) {
      // The strategy's hooks run inside the capture: DDP's all-reduces replay with backward.
      graphed_ = std::make_unique<GraphedStep>(
          s_.model->parameters(), s_.model->buffers(),
          [this](const torch::Tensor& images, const torch::Tensor& labels) {
            return forward_backward(images, labels, /*last_micro_step=*/true);
          },
          [this] { s_.strategy->after_graph_pass(); });
    }
  }

  // Every rank: continues from the first checkpoint of `from` that loads on every rank.
  void resume(const ResumeFrom& from) {
    if (s_.world.rank == 0) {
      checkpointer_.remove_partial();
      checkpointer_.set_aside_incomplete();
    }
    const std::optional<Resumed> resumed =
        load_first_loadable(from, config_, *s_.strategy, s_.device);
    if (!resumed) {
      log::info("--resume: no complete checkpoint in {}; starting from step 0", from.where);
      metrics_.resume_at(0);
      return;
    }
    const CheckpointInfo& info = resumed->info;
    if (info.step > s_.total_steps) {
      throw UserError(fmt::format("{} is at step {}, past this run's {} steps; raise "
                                  "train.max_steps or train.epochs to continue it",
                                  resumed->path, info.step, s_.total_steps));
    }
    if (s_.world.rank == 0) {
      warn_resume_changes(*resumed, {config_, s_.strategy->data_group().size, s_.images_per_step,
                                     s_.steps_per_epoch, s_.total_steps});
    }
    step_ = timed_first_step_ = last_checkpoint_step_ = info.step;
    // The logging interval goes on where the checkpoint was taken inside it.
    interval_first_step_ = info.interval_first_step;
    loss_sum_.fill_(info.interval_loss_sum);
    nonfinite_in_interval_ = restored_skipped_ = info.interval_skipped;
    train_seconds_before_ = info.train_seconds;
    last_eval_ = {info.test_loss, info.test_accuracy};
    metrics_.resume_at(step_);
    log::info("resumed from {} at step {}", resumed->path, step_);
    if (s_.world.rank == 0) {  // the newer ones of this run, which did not load
      for (const std::string& path : from.checkpoints) {
        if (path == resumed->path) break;
        checkpointer_.set_aside(path);
      }
    }
    if (step_ == s_.total_steps) {
      resumed_finished_ = true;
      log::info("the run had finished: step {} of {}; nothing left to train", step_,
                s_.total_steps);
      // A checkpoint from before the end's evaluation (a run continued with a lower
      // train.max_steps): the final record still needs its test figures.
      if (!std::isfinite(last_eval_.accuracy)) {
        last_eval_ = evaluate((step_ - 1) / s_.steps_per_epoch);
      }
    }
  }

  RunResult train() {
    while (step_ < s_.total_steps && stop_signal_ == 0) {
      const int64_t epoch = step_ / s_.steps_per_epoch;
      const int64_t epoch_end = std::min((epoch + 1) * s_.steps_per_epoch, s_.total_steps);
      s_.train_loader->start_epoch(epoch, step_ - epoch * s_.steps_per_epoch);
      start_interval();
      while (step_ < epoch_end && stop_signal_ == 0) {
        // A timed collective costs device time (dist::set_timing): only the steps whose
        // figures are reported or traced are timed.
        dist::set_timing(timeline_.enabled() || reports_after(step_ + 1, epoch_end));
        profiler_.before_step(step_);
        train_step();
        profiler_.after_step(step_);
        if (timeline_.enabled()) timeline_.add_step_spans(s_.strategy->last_step_spans());
        ++step_;
        if (reports_after(step_, epoch_end)) report_step(epoch);
        const int64_t every = config_.train.checkpoint_every;
        if (step_ < epoch_end && every > 0 && step_ % every == 0) checkpoint();
      }
      if (step_ == epoch_end) end_epoch(epoch);
    }
    if (step_ < s_.total_steps) {  // stopped by a signal
      checkpoint();
      // mpirun ends the job when the first rank exits with a non-zero code: no rank exits
      // before rank 0 has written the checkpoint.
      s_.strategy->reduce_metrics(report_, dist::ReduceOp::kSum);
      to_host(report_);
    }
    return finish();
  }

 private:
  // One optimizer step: grad_accum micro-steps of forward and backward, then the update.
  // No host synchronisation here (fp16 loss scaling, train.nonfinite = "skip" and a CUDA rank
  // in debug.slow_ranks excepted).
  void train_step() {
    const int64_t accum = config_.train.grad_accum;
    s_.strategy->before_forward(step_);
    straggler_.start(step_);
    step_loss_.zero_();
    for (int64_t micro = 0; micro < accum; ++micro) {
      data::Batch batch;
      {
        Timeline::Phase phase(timeline_, "data wait");
        const Clock::time_point wait_start = Clock::now();
        DTRAIN_CHECK(s_.train_loader->next(batch), "loader ran out at step {}", step_);
        input_meter_.add_wait(seconds_since(wait_start));
      }
      if (graphed_) {
        Timeline::Phase phase(timeline_, "forward and backward (CUDA graph)");
        step_loss_ += graphed_->run(batch);
        // A batch of another shape ran eagerly, through the strategy's hooks.
        if (graphed_->replayed()) s_.strategy->after_replayed_backward();
      } else {
        step_loss_ += forward_backward(batch.images, batch.labels, micro + 1 == accum);
      }
    }
    straggler_.pause(*s_.strategy, timeline_);
    if (skip_nonfinite_ && !step_loss_finite()) return skip_update(nonfinite_skipped_);
    loss_sum_ += step_loss_;
    if (scaler_) {
      const bool finite = scaler_->unscale_and_check(
          s_.strategy->gradient_owners(),
          [this](torch::Tensor found_inf) {
            s_.strategy->reduce_metrics(found_inf, dist::ReduceOp::kSum);
          });
      scaler_->update();
      if (!finite) return skip_update(overflow_skipped_);
    }
    Timeline::Phase phase(timeline_, "optimizer step");
    s_.strategy->step(s_.schedule->lr_at(step_));
  }

  // Whether the metrics are written once `step` steps are done: every run.log_every steps and
  // at the end of each epoch.
  bool reports_after(int64_t step, int64_t epoch_end) const {
    return step % config_.run.log_every == 0 || step == epoch_end;
  }

  // One micro-step's forward and backward, between the strategy's before_backward and
  // after_backward; returns its loss, divided by the micro-steps.
  torch::Tensor forward_backward(const torch::Tensor& images, const torch::Tensor& labels,
                                 bool last_micro_step) {
    torch::Tensor loss;
    {
      Timeline::Phase phase(timeline_, "forward");
      AutocastScope autocast(config_.train.precision);
      loss = torch::nn::functional::cross_entropy(
          s_.model->forward(images), labels,
          torch::nn::functional::CrossEntropyFuncOptions().label_smoothing(
              config_.train.label_smoothing));
    }
    loss = loss / static_cast<double>(config_.train.grad_accum);
    if (inject_nan_loss()) loss = loss * std::numeric_limits<double>::quiet_NaN();
    {
      Timeline::Phase phase(timeline_, "backward");
      s_.strategy->before_backward(last_micro_step);
      (scaler_ ? scaler_->scale(loss) : loss).backward();
      s_.strategy->after_backward(last_micro_step);
    }
    return loss.detach();
  }

  // debug.nan_loss_steps on this rank: a test of train.nonfinite, not a real divergence.
  bool inject_nan_loss() const {
    const auto& debug = config_.debug;
    const auto named = [](const std::vector<int64_t>& list, int64_t value) {
      return std::find(list.begin(), list.end(), value) != list.end();
    };
    return named(debug.nan_loss_steps, step_ + 1) &&
           (debug.nan_loss_ranks.empty() || named(debug.nan_loss_ranks, s_.world.rank));
  }

  // train.nonfinite = "skip": whether the step's loss is finite on every rank (the average
  // carries a NaN or Inf from any rank). A reduction and a host sync.
  bool step_loss_finite() {
    s_.strategy->reduce_metrics(step_loss_, dist::ReduceOp::kAverage);
    const double loss = to_host(step_loss_).item<double>();
    if (std::isfinite(loss)) return true;
    ++nonfinite_in_interval_;
    if (s_.world.rank == 0) {
      log::warn("step {}: loss is {}; its update is skipped (train.nonfinite = \"skip\")",
                step_ + 1, loss);
    }
    return false;
  }

  // Drops every gradient of the step instead of applying them, as an update would release
  // them: the strategy's (ZeRO's shards) and autograd's on the model (the gradient buckets).
  void skip_update(int64_t& skipped) {
    for (torch::Tensor& param : s_.strategy->gradient_owners()) param.mutable_grad().reset();
    for (torch::Tensor& param : s_.model->parameters()) param.mutable_grad().reset();
    ++skipped;
  }

  // Collective. One reduction carries the interval's loss and the stop request: report_ =
  // [summed loss, SIGINT, SIGTERM, SIGUSR1 seen], averaged over the data group.
  void report_step(int64_t epoch) {
    const int64_t steps = step_ - interval_first_step_ - nonfinite_in_interval_;
    // This session's part of the interval, which its clock timed.
    const int64_t timed_steps =
        step_ - timed_first_step_ - (nonfinite_in_interval_ - restored_skipped_);
    const std::vector<int>& signals = stop_signals();
    for (size_t i = 0; i < signals.size(); ++i) {
      if (StopSignals::received() == signals[i]) report_[static_cast<int64_t>(i) + 1].fill_(1.0);
    }
    s_.strategy->reduce_metrics(report_, dist::ReduceOp::kAverage);
    const torch::Tensor reduced = to_host(report_);
    for (size_t i = 0; i < signals.size() && stop_signal_ == 0; ++i) {
      if (reduced[static_cast<int64_t>(i) + 1].item<float>() > 0) {
        stop_signal_ = asked_signal(signals[i]);
      }
    }
    if (steps == 0) {
      throw UserError(fmt::format("steps {} to {}: the loss was NaN or Inf at each, so each "
                                  "update was skipped: training diverged; {}",
                                  interval_first_step_ + 1, step_, diverged_hint(config_)));
    }
    const double loss = reduced[0].item<double>() / static_cast<double>(steps);
    if (!std::isfinite(loss)) {  // the interval's mean: one of its steps, not which one
      throw UserError(fmt::format(
          "the training loss is {} in steps {} to {} (checked every run.log_every steps): "
          "training diverged; {}",
          nonfinite_name(loss), interval_first_step_ + 1, step_, diverged_hint(config_)));
    }
    const double seconds = seconds_since(interval_start_) - left_out_seconds_;
    // The global batch less the shares of workers lost since the start (tolerate_worker_loss).
    const int64_t images_per_step =
        s_.images_per_step / s_.strategy->data_group().size * s_.strategy->ranks_training();
    const double img_per_s = static_cast<double>(timed_steps * images_per_step) / seconds;
    const double lr = s_.schedule->lr_at(step_ - 1);
    progress_.step({step_, s_.total_steps, epoch, loss, lr, img_per_s,
                    seconds / timed_steps * static_cast<double>(s_.total_steps - step_)});
    MetricFields fields = {{"epoch", static_cast<double>(epoch)},
                           {"loss/train", loss},
                           {"lr", lr},
                           {"throughput/img_per_s", img_per_s},
                           {"time/step_ms", 1e3 * seconds / timed_steps}};
    for (auto& field : input_meter_.fields(*s_.train_loader, timed_steps, seconds)) {
      fields.push_back(std::move(field));
    }
    // The strategy's figures of the interval's last step (reading them may wait for the
    // device): communication, memory.
    for (const dist::Stat& stat : s_.strategy->stats()) {
      fields.push_back({stat.name, stat.value});
    }
    for (auto& field : peak_memory(s_.device)) fields.push_back(std::move(field));
    if (scaler_) {
      fields.push_back({"amp/loss_scale", scaler_->current_scale()});
      fields.push_back({"amp/skipped_steps", static_cast<double>(overflow_skipped_)});
    }
    if (skip_nonfinite_) {
      fields.push_back({"loss/skipped_steps", static_cast<double>(nonfinite_skipped_)});
    }
    metrics_.write("step", step_, fields);
    report_.zero_();
    interval_first_step_ = timed_first_step_ = step_;
    nonfinite_in_interval_ = restored_skipped_ = 0;
    start_interval();
  }

  void end_epoch(int64_t epoch) {
    const bool last = step_ == s_.total_steps;
    const int64_t eval_every = config_.train.eval_every;
    if (last || (eval_every > 0 && (epoch + 1) % eval_every == 0)) last_eval_ = evaluate(epoch);
    const int64_t every = config_.train.checkpoint_every;
    if (last || every == 0 || step_ % every == 0) checkpoint();
  }

  EvalResult evaluate(int64_t epoch) {
    if (!s_.test_loader) return {};
    Timeline::Phase phase(timeline_, "evaluation");
    const LeftOutOfInterval left_out(*this);  // evaluation time is not training throughput
    torch::NoGradGuard no_grad;
    s_.strategy->before_eval();
    s_.model->eval();
    // Each rank evaluates its shard of the test set; the sums are reduced over ranks.
    auto options = torch::dtype(torch::kFloat64).device(s_.device);
    torch::Tensor sums = torch::zeros({4}, options);  // loss, correct, seen, failed ranks
    torch::Tensor loss_sum = sums[0];
    torch::Tensor correct = sums[1];
    int64_t seen = 0;
    // A test file that does not load (a damaged image) is found here, after an epoch of
    // training: this rank stops evaluating, and the reduction below tells every rank, which
    // then write the epoch's checkpoint before the run ends.
    std::string failure;
    s_.test_loader->start_epoch(0);
    data::Batch batch;
    while (next_test_batch(batch, failure)) {
      AutocastScope autocast(config_.train.precision);
      torch::Tensor logits = s_.model->forward(batch.images).to(torch::kFloat32);
      loss_sum += torch::nn::functional::cross_entropy(
          logits, batch.labels,
          torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum));
      correct += logits.argmax(1).eq(batch.labels).sum();
      seen += batch.labels.size(0);
    }
    s_.model->train();
    sums[2].fill_(static_cast<double>(seen));
    sums[3].fill_(failure.empty() ? 0.0 : 1.0);
    s_.strategy->reduce_metrics(sums, dist::ReduceOp::kSum);
    const torch::Tensor totals = to_host(sums);
    if (totals[3].item<double>() > 0) end_failed_evaluation(failure);
    const double count = totals[2].item<double>();
    EvalResult result{totals[0].item<double>() / count, totals[1].item<double>() / count};
    progress_.line(fmt::format("epoch {} | test loss {:.4f} | test accuracy {:.2f}%", epoch,
                               result.loss, 100.0 * result.accuracy));
    // Wall time since the process began, plus earlier sessions': time to an accuracy.
    metrics_.write("eval", step_,
                   {{"epoch", static_cast<double>(epoch)},
                    {"loss/test", result.loss},
                    {"accuracy/test", result.accuracy},
                    {"time/wall_s", train_seconds_before_ + seconds_since(process_start)}});
    return result;
  }

  // The next test batch, false at the end or once `failure` holds this rank's error. Every
  // rank has as many test batches (the last may be empty); where forward communicates, the
  // ranks also agree on each batch, so that all stop together when one fails.
  bool next_test_batch(data::Batch& batch, std::string& failure) {
    bool more = false;
    try {
      more = s_.test_loader->next(batch);
    } catch (const UserError& e) {
      failure = e.what();
    }
    if (s_.strategy->forward_communicates()) return all_workers(failure.empty()) && more;
    return failure.empty() && more;
  }

  // Every rank, once a rank's evaluation failed with `failure` (empty on the others): the
  // training so far is checkpointed, then the rank that failed reports it and the others leave
  // the report to it.
  [[noreturn]] void end_failed_evaluation(const std::string& failure) {
    checkpoint();
    if (failure.empty()) throw FailedOnAnotherRank("the evaluation failed on another rank");
    if (last_checkpoint_step_ == 0) throw UserError(failure);
    throw UserError(fmt::format("{} (the training up to step {} is checkpointed)", failure,
                                last_checkpoint_step_));
  }

  // Every rank writes its own, then (all written: the reduction is collective) rank 0 merges.
  void write_timeline() {
    if (!timeline_.enabled()) return;
    timeline_.write();
    torch::Tensor written = torch::ones({1}, torch::TensorOptions().device(s_.device));
    s_.strategy->reduce_metrics(written, dist::ReduceOp::kSum);
    if (s_.world.rank == 0) Timeline::merge(s_.run_dir);
  }

  // Every rank, once per step at most. Weights holding NaN or Inf are never written.
  void checkpoint() {
    if (config_.train.keep_checkpoints == 0 || step_ == last_checkpoint_step_) return;
    Timeline::Phase phase(timeline_, "checkpoint");
    const LeftOutOfInterval left_out(*this);
    // Every worker writes its part of the strategy's state; rank 0 the model and the rest.
    s_.strategy->prepare_checkpoint();
    const dist::NamedTensors model_state = s_.strategy->model_state();
    if (!all_finite(model_state)) {  // the same consolidated state on every rank
      throw UserError(fmt::format(
          "step {}: the weights hold NaN or Inf, so they are not checkpointed ({}); {}", step_,
          last_checkpoint_step_ > 0
              ? fmt::format("the newest checkpoint stays step {}'s", last_checkpoint_step_)
              : std::string("no earlier checkpoint"),
          diverged_hint(config_)));
    }
    last_checkpoint_step_ = step_;
    CheckpointInfo info = checkpoint_info();
    // The interval's losses so far, reduced as report_step reduces them.
    if (interval_first_step_ < step_) {
      torch::Tensor loss_sum = loss_sum_.to(torch::kFloat64);
      s_.strategy->reduce_metrics(loss_sum, dist::ReduceOp::kAverage);
      info.interval_loss_sum = to_host(loss_sum).item<double>();
    }
    checkpointer_.save(info, model_state, *s_.strategy, to_toml(config_),
                       s_.world.rank, [this](bool ok) { return all_workers(ok); });
  }

  // Whether every worker passed true. Blocking: the host reads the sum, so on GPUs too it
  // returns only once every worker has called (bounded by dist.timeout_s). Failures are
  // counted, not successes: a worker the run goes on without (dist.ps.tolerate_worker_loss)
  // adds nothing to the sum.
  bool all_workers(bool ok) {
    torch::Tensor failures =
        torch::full({1}, ok ? 0.0 : 1.0, torch::TensorOptions().device(s_.device));
    s_.strategy->reduce_metrics(failures, dist::ReduceOp::kSum);
    return to_host(failures).item<double>() == 0.0;
  }

  CheckpointInfo checkpoint_info() const {
    CheckpointInfo info;
    info.step = step_;
    info.epoch = step_ / s_.steps_per_epoch;
    info.strategy = dist::describe_strategy(config_.dist);
    info.world_size = s_.strategy->data_group().size;
    info.global_batch = s_.images_per_step;
    info.steps_per_epoch = s_.steps_per_epoch;
    info.total_steps = s_.total_steps;
    info.train_seconds = train_seconds_before_ + seconds_since(session_start_);
    info.test_accuracy = last_eval_.accuracy;
    info.test_loss = last_eval_.loss;
    info.interval_first_step = interval_first_step_;
    info.interval_skipped = nonfinite_in_interval_;
    return info;
  }

  RunResult finish() {
    progress_.end_line();
    s_.strategy->finish();
    write_timeline();
    if (graphed_) {
      log::info("train.cuda_graph: {} steps replayed, {} run eagerly (batches of another shape)",
                graphed_->replays(), graphed_->eager_runs());
    }
    // A run resumed finished adds nothing: this session trained no step.
    const double seconds =
        train_seconds_before_ + (resumed_finished_ ? 0.0 : seconds_since(session_start_));
    const int signal = step_ < s_.total_steps ? stop_signal_ : 0;
    if (signal == 0) {
      metrics_.write("final", step_,
                     {{"accuracy/test", last_eval_.accuracy},
                      {"loss/test", last_eval_.loss},
                      {"time/train_s", seconds}});
    }
    return {step_, last_eval_.accuracy, last_eval_.loss, seconds, signal};
  }

  const Config& config_;
  const bool skip_nonfinite_;
  RunSetup s_;
  Checkpointer checkpointer_;
  MetricsWriter metrics_;
  Progress progress_;
  StepProfiler profiler_;
  Timeline timeline_;
  Straggler straggler_;
  std::optional<LossScaler> scaler_;
  std::unique_ptr<GraphedStep> graphed_;  // train.cuda_graph
  torch::Tensor report_;    // [4] float32 on the device: see report_step
  torch::Tensor loss_sum_;  // report_[0]: the summed losses of the interval's applied steps
  torch::Tensor step_loss_;  // [] float32 on the device: this step's summed micro-step losses
  int64_t step_ = 0;
  int64_t interval_first_step_ = 0;
  int64_t timed_first_step_ = 0;       // interval_first_step_, or the step resumed from
  int64_t nonfinite_in_interval_ = 0;  // skipped for a NaN/Inf loss: not in the logged loss
  int64_t restored_skipped_ = 0;       // of those, the ones before the step resumed from
  int64_t overflow_skipped_ = 0;   // fp16: steps whose gradients overflowed
  int64_t nonfinite_skipped_ = 0;  // train.nonfinite = "skip": steps with a NaN/Inf loss
  int64_t last_checkpoint_step_ = 0;
  int stop_signal_ = 0;  // agreed by every rank at a report
  EvalResult last_eval_;
  double train_seconds_before_ = 0.0;  // earlier sessions of a resumed run
  bool resumed_finished_ = false;      // resumed at the run's last step
  Clock::time_point session_start_;
  Clock::time_point interval_start_;
  double left_out_seconds_ = 0.0;  // of the interval: its checkpoints' and evaluations'
  InputMeter input_meter_;

  // A logging interval starts: after a report, at an epoch's start.
  void start_interval() {
    interval_start_ = Clock::now();
    left_out_seconds_ = 0.0;
    input_meter_.restart(*s_.train_loader);
  }

  // Leaves its scope's time (a checkpoint, an evaluation) out of the interval's, which goes on
  // around it: the interval's figures are of its training alone, however its steps fall
  // between checkpoints (restarting the interval instead had divided the time since the
  // last checkpoint by all of the interval's steps).
  class LeftOutOfInterval {
   public:
    explicit LeftOutOfInterval(Trainer& trainer)
        : trainer_(trainer), start_(Clock::now()), cpu_start_(process_cpu_seconds()) {}
    ~LeftOutOfInterval() {
      trainer_.left_out_seconds_ += seconds_since(start_);
      trainer_.input_meter_.leave_out_cpu(process_cpu_seconds() - cpu_start_);
    }

   private:
    Trainer& trainer_;
    Clock::time_point start_;
    double cpu_start_;
  };
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  if (!out) throw UserError(fmt::format("{}: cannot write: {}", path, std::strerror(errno)));
}

void report_end(const RunResult& result, const Config& config, const RunFlags& flags,
                int world_size) {
  if (result.stop_signal != 0) {
    const bool saved = config.train.keep_checkpoints > 0;
    log::info("stopped by {} at step {}{}", signal_name(result.stop_signal), result.steps,
              saved ? fmt::format("; checkpoint {}/checkpoints/step_{:08d}", run_dir_of(config),
                                  result.steps)
                    : "; not checkpointed (train.keep_checkpoints = 0)");
    if (saved) log::info("resume with: {}", resume_command(flags.command, world_size));
  } else if (std::isfinite(result.test_accuracy)) {
    log::info("final test accuracy {:.2f}% after {} steps ({:.0f} s)",
              100.0 * result.test_accuracy, result.steps, result.train_seconds);
  }
}

// A second SIGINT or SIGTERM (StopSignals), on the signal waiter's thread: ends the run where
// it stands, whatever the main thread is in (a collective; a checkpoint's write, which leaves
// the previous checkpoint the newest complete one). Rank 0 names the checkpoint to resume
// from; the others give it 2 s to end the job, so that its line is the one printed. Through
// MPI, so that the job ends quietly as for a stop (dist::end_world).
[[noreturn]] void end_at_once(int signal, const Config& config, const RunFlags& flags) {
  const std::optional<dist::WorldInfo> world = dist::started_world();
  const int size = world ? world->size : 1;
  if (!world || world->rank == 0) {
    const std::optional<std::string> newest =
        Checkpointer(run_dir_of(config) + "/checkpoints", config.train.keep_checkpoints).latest();
    log::info("stopped at once by {} (a second stop signal), not waiting for a checkpoint; {}",
              signal_name(signal),
              newest ? fmt::format("the newest is {}; resume with: {}", *newest,
                                   resume_command(flags.command, size))
                     : std::string("there is none to resume from"));
  } else {
    std::this_thread::sleep_for(std::chrono::seconds(2));
  }
  std::fflush(nullptr);
  if (size > 1) dist::abort_world(stop_exit_code(signal));
  std::_Exit(stop_exit_code(signal));
}

}  // namespace

RunResult run_training(const Config& config, const RunFlags& flags) {
  // Before MPI starts and before anything is written: a run never writes into another's
  // directory. Every rank checks; a refused run exits 2 on each.
  const std::string run_dir = run_dir_of(config);
  std::optional<ResumeFrom> resume_from_checkpoints;
  if (!flags.dry_run) {
    check_run_dir(run_dir, flags.resume);
    if (flags.resume) resume_from_checkpoints = resume_from(run_dir, *flags.resume);
  }
  if (flags.dry_run && flags.world_size) {  // another world: no ranks to start
    check_world(config, *flags.world_size);
    report_memory_plan(config, *flags.world_size, flags.dry_run_json, /*imagined_world=*/true);
    return {};
  }
  // From here on every rank, servers included, takes the stop signals (mpirun passes a signal
  // to all of them): one during start-up stops the run at its first report, and a server that
  // took the default action would end before the workers' checkpoint had its state.
  std::optional<StopSignals> signals;
  if (!flags.dry_run) {  // until training (or serving) ends
    signals.emplace([&config, &flags](int signal) { end_at_once(signal, config, flags); });
  }
  RunSetup setup = build_run(config);
  if (signals) signals->reinstall();
  log::info("{}", describe_run(config, setup));
  if (!config.debug.slow_ranks.empty()) {
    log::info("debug: rank(s) {} slowed {}x", fmt::join(config.debug.slow_ranks, ", "),
              config.debug.slow_factor);
  }
  if (flags.dry_run) {
    if (setup.world.rank == 0) {
      report_memory_plan(config, setup.world.size, flags.dry_run_json, /*imagined_world=*/false);
    }
    return {};
  }

  const int rank = setup.world.rank;
  const bool fresh_dir = !holds_run(setup.run_dir);
  create_run_dir(setup.run_dir);
  std::optional<RunDirLock> lock;  // until the run ends
  if (rank == 0) lock.emplace(setup.run_dir);
  log::open_file(setup.run_dir +
                 (rank == 0 ? std::string("/train.log") : fmt::format("/train.rank{}.log", rank)));
  if (rank == 0) write_text(setup.run_dir + "/config.toml", to_toml(config));

  if (setup.strategy->role() == dist::Role::kServer) {
    const auto& slow = config.debug.slow_ranks;
    if (std::find(slow.begin(), slow.end(), rank) != slow.end()) {
      log::warn("debug.slow_ranks: rank {} is a dedicated server, which takes no steps to slow",
                rank);
    }
    setup.strategy->serve();  // until the workers finish, a stop they agree on included
    return {};
  }
  const int world_size = setup.world.size;
  std::optional<Trainer> trainer;
  try {
    trainer.emplace(config, std::move(setup));
    if (resume_from_checkpoints) trainer->resume(*resume_from_checkpoints);
    if (rank == 0 && config.train.keep_checkpoints > 0) {
      Checkpointer(run_dir + "/checkpoints", config.train.keep_checkpoints).check_writable();
    }
  } catch (...) {
    // A run refused before its first step (a checkpoint that does not load, or that is past
    // this run's end) leaves no run behind, so the corrected command may take the same name.
    if (fresh_dir) {
      trainer.reset();
      log::close_file();
      remove_unstarted_run(run_dir, rank);
    }
    throw;
  }
  const RunResult result = trainer->train();
  report_end(result, config, flags, world_size);
  return result;
}

}  // namespace dtrain::trainer
