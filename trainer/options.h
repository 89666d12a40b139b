// Options owned by the trainer itself (config sections [run], [train] and [debug]) and the
// root Config that gathers every module's options. Only trainer/ sees the root Config.
#pragma once

#include "common/error.h"
#include "common/option_spec.h"
#include "data/options.h"
#include "dist/options.h"
#include "models/options.h"
#include "optim/options.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trainer {

struct RunOptions {
  // The run's name: outputs go to out_dir/name/.
  std::string name = "fashion_mnist_cnn";
  std::string out_dir = "runs";
  // Seeds weights, data order and augmentation.
  int64_t seed = 0;
  // "auto" (CUDA when available), "cpu" or "cuda".
  std::string device = "auto";
  // Torch intra-op threads per rank; 0: the machine's cores divided by the ranks on it.
  int64_t num_threads = 0;
  // Steps between progress lines and per-step metrics records.
  int64_t log_every = 50;
  // Optimizer steps [profile_start, profile_start + profile_steps) under the Kineto profiler
  // (CUDA kernels and runtime calls), saved as Chrome traces run_dir/trace.rankN.json; 0: off.
  int64_t profile_start = 10;
  int64_t profile_steps = 0;
  // A Chrome-trace timeline of every step on every rank (trainer/timeline.h): run_dir/
  // timeline.json. Waits for the device every step on GPUs.
  bool trace = false;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

struct TrainOptions {
  int64_t epochs = 10;
  // Stop after this many optimizer steps (0: train all epochs).
  int64_t max_steps = 0;
  // Micro-steps accumulated into one optimizer step.
  int64_t grad_accum = 1;
  // Cross-entropy against (1 - e) one-hot + e uniform targets (Szegedy et al. 2016); the
  // reported test loss stays the plain cross-entropy.
  double label_smoothing = 0.0;
  // "fp32", or autocast "bf16" / "fp16" (CUDA; fp16 with dynamic loss scaling).
  std::string precision = "fp32";
  // NHWC activations and weights (CUDA convolutions run faster).
  bool channels_last = false;
  // Evaluate on the test split every this many epochs (0: only at the end).
  int64_t eval_every = 1;
  // Checkpoint every this many steps (0: at the end of every epoch).
  int64_t checkpoint_every = 0;
  // Complete checkpoints kept on disk (older ones are deleted); 0 disables checkpoints.
  // The last step is always checkpointed, and so is a run stopped by a signal.
  int64_t keep_checkpoints = 2;
  // On a NaN or Inf training loss: "stop" (found when the loss is logged, every
  // run.log_every steps: no cost per step) or "skip" the step's update (found every step: a
  // host sync and a one-float reduction per step on GPUs).
  std::string nonfinite = "stop";
  // Capture forward and backward as a CUDA graph on the first step and replay it after
  // (trainer/graphed_step.h): one launch instead of hundreds where the host's launches bound
  // the step. Needs CUDA, strategy "single", one micro-step, bf16 or fp32. "auto": wherever
  // that holds; "on": a config error where it does not; "off": never.
  std::string cuda_graph = "auto";

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// Stragglers made on demand, for experiments on what bounded staleness buys: a slowed rank
// idles (slow_factor - 1) times as long as its forward and backward took.
struct DebugOptions {
  // World ranks whose steps are slowed; empty: none. Each must be below the world size.
  std::vector<int64_t> slow_ranks;
  // Each slowed rank's forward and backward take this many times as long.
  double slow_factor = 1.5;
  // "fixed": every slowed rank, every step (a slow machine: no staleness bound helps, the
  // others catch up with it within k steps); "rotating": step s slows slow_ranks[s mod n]
  // alone (delays that move between workers, which bounded staleness absorbs).
  std::string slow_pattern = "fixed";
  // Fault injection for tests of train.nonfinite: at these steps (numbered from 1, as
  // printed) the loss of the ranks in nan_loss_ranks (empty: every rank) is made NaN, and
  // with it every gradient of that backward.
  std::vector<int64_t> nan_loss_steps;
  std::vector<int64_t> nan_loss_ranks;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

struct Config {
  RunOptions run;
  TrainOptions train;
  models::ModelOptions model;
  data::DataOptions data;
  optim::OptimizerOptions optim;
  optim::ScheduleOptions schedule;
  dist::DistOptions dist;
  DebugOptions debug;
};

// Every key, bound to the fields of `config`: one section per options struct ([run], [train],
// [model], [data], [optim], [schedule], [dist], [debug]), each as its struct declares it.
OptionSpecs config_keys(Config& config);

}  // namespace dtrain::trainer
