#include "trainer/options.h"

namespace dtrain::trainer {

void RunOptions::declare(OptionSpecs& keys) {
  keys.add("name", &name, "run name; outputs go to out_dir/name/");
  keys.add("out_dir", &out_dir, "directory holding the runs");
  keys.add("seed", &seed, "seeds weights, data order and augmentation").at_least(0);
  keys.add("device", &device, "where ranks compute: auto (CUDA when available), cpu or cuda")
      .one_of({"auto", "cpu", "cuda"});
  keys.add("num_threads", &num_threads,
           "torch threads per rank; 0: cores divided by the ranks on this machine")
      .range(0, 1024);
  keys.add("log_every", &log_every, "steps between progress lines and step metrics").at_least(1);
  keys.add("profile_start", &profile_start, "first step profiled (run.profile_steps)")
      .at_least(0);
  keys.add("profile_steps", &profile_steps,
           "steps traced by the Kineto profiler (CUDA LibTorch) into trace.rankN.json; 0 = off")
      .range(0, 1000);
  keys.add("trace", &trace,
           "write a Chrome-trace timeline of every step on every rank (data wait, forward, "
           "backward, optimizer, each collective) to timeline.json; slows GPU runs");
}

FieldErrors RunOptions::validate() const {
  FieldErrors errors = check_declared(*this);
  // "." and ".." would put the run's files in out_dir itself or above it, beside other runs.
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    errors.push_back({"name", "must be a non-empty name without '/', other than . and .."});
  }
  if (out_dir.empty()) errors.push_back({"out_dir", "must not be empty"});
  return errors;
}

void TrainOptions::declare(OptionSpecs& keys) {
  keys.add("epochs", &epochs, "epochs to train").at_least(1);
  keys.add("max_steps", &max_steps, "stop after this many steps (0: all epochs)").at_least(0);
  keys.add("grad_accum", &grad_accum, "micro-steps accumulated per optimizer step")
      .range(1, 4096);
  keys.add("label_smoothing", &label_smoothing,
           "training loss against (1 - e) one-hot + e uniform targets; 0 = off")
      .range(0.0, 0.99);
  keys.add("precision", &precision,
           "fp32, or autocast bf16 / fp16 (CUDA; fp16 with loss scaling)")
      .one_of({"fp32", "bf16", "fp16"});
  keys.add("channels_last", &channels_last,
           "NHWC weights and activations (faster convolutions on CUDA)");
  keys.add("eval_every", &eval_every, "evaluate every this many epochs (0: only at the end)")
      .at_least(0);
  keys.add("checkpoint_every", &checkpoint_every,
           "checkpoint every this many steps (0: at the end of every epoch)")
      .at_least(0);
  keys.add("keep_checkpoints", &keep_checkpoints,
           "complete checkpoints kept on disk, the last step's always among them (0: none)")
      .at_least(0);
  keys.add("nonfinite", &nonfinite,
           "on a NaN/Inf loss: stop (checked at each log) or skip the update (checked every "
           "step: a host sync per step on GPUs)")
      .one_of({"stop", "skip"});
  keys.add("cuda_graph", &cuda_graph,
           "replay forward and backward as one CUDA graph captured on the first step (needs "
           "CUDA, strategy single or ddp, grad_accum 1, bf16 or fp32); auto: wherever that "
           "holds, on: an error where not")
      .one_of({"auto", "on", "off"});
}

FieldErrors TrainOptions::validate() const { return check_declared(*this); }

void DebugOptions::declare(OptionSpecs& keys) {
  keys.add("slow_ranks", &slow_ranks,
           "world ranks made stragglers: each step they idle after forward and backward "
           "(empty: none)")
      .at_least(0);
  keys.add("slow_factor", &slow_factor,
           "a slowed rank's forward and backward take this many times as long")
      .at_least(1);
  keys.add("slow_pattern", &slow_pattern,
           "fixed: every slowed rank every step; rotating: step s slows slow_ranks[s mod n] "
           "alone")
      .one_of({"fixed", "rotating"});
  keys.add("nan_loss_steps", &nan_loss_steps,
           "fault injection: steps (from 1) whose loss is made NaN on debug.nan_loss_ranks "
           "(empty: none)")
      .at_least(1);
  keys.add("nan_loss_ranks", &nan_loss_ranks,
           "world ranks whose loss debug.nan_loss_steps makes NaN (empty: every rank)")
      .at_least(0);
}

FieldErrors DebugOptions::validate() const { return check_declared(*this); }

OptionSpecs config_keys(Config& config) {
  OptionSpecs keys;
  keys.add_section("run", config.run);
  keys.add_section("train", config.train);
  keys.add_section("model", config.model);
  keys.add_section("data", config.data);
  keys.add_section("optim", config.optim);
  keys.add_section("schedule", config.schedule);
  keys.add_section("dist", config.dist);
  keys.add_section("debug", config.debug);
  return keys;
}

}  // namespace dtrain::trainer
