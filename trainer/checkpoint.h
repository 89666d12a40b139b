// Checkpoints: one directory per step, written under a temporary name and renamed once
// complete (with a DONE marker), so a crash mid-write never damages the last good one.
//   <dir>/step_00000100/{model.pt, optimizer.pt, state.toml, DONE}
// model.pt is a plain state dict that Python's torch.load reads (torchvision names).
#pragma once

#include "dist/strategy.h"

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

namespace dtrain::trainer {

struct CheckpointInfo {
  int64_t step = 0;   // optimizer steps completed
  int64_t epoch = 0;  // epoch the next step belongs to
};

class Checkpointer {
 public:
  // keep: complete checkpoints kept; older ones are deleted after each save.
  Checkpointer(std::string dir, int64_t keep);

  // Writes the checkpoint of `info.step` (blocking): `model_state` (the strategy's
  // consolidated model state) and the strategy's own state. `config_toml` is the resolved
  // config. Rank 0 only, after every rank's Strategy::prepare_checkpoint().
  void save(const CheckpointInfo& info, const dist::NamedTensors& model_state,
            dist::Strategy& strategy, const std::string& config_toml) const;
  // The newest complete checkpoint directory in `dir`, if any.
  std::optional<std::string> latest() const;
  // Restores model and strategy state through the strategy (every rank); throws UserError
  // on an incomplete or foreign checkpoint.
  static CheckpointInfo load(const std::string& path, dist::Strategy& strategy);

 private:
  void prune() const;

  std::string dir_;
  int64_t keep_;
};

}  // namespace dtrain::trainer
