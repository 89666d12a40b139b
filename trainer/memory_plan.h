// The dry run's memory report: the model-state bytes per rank (dist/memory_model.h) of the
// configured strategy at a world size, every strategy beside it with the ZeRO paper's figure,
// printed as tables and, on request, written as JSON (for scripts and tests):
//   {"world_size": N, "strategy": "zero stage 2", "optimizer": "adamw", "state_tensors": 2,
//    "ranks": [{"rank": 0, "parameters_mb": .., "gradients_mb": .., "optimizer_state_mb": ..,
//               "total_mb": .., "parameters_bytes": .., ...}, ...],
//    "strategies": [{"strategy": "ddp", "ranks": [...], "problem": "", "paper_total_mb": ..,
//                    "reports_parameters_and_gradients": true}, ...]}
// The *_mb figures are MiB, as the run's memory/* metrics, which report rank 0's.
#pragma once

#include "trainer/options.h"

#include <torch/torch.h>

#include <string>
#include <vector>

namespace dtrain::trainer {

// "--world-size" as given: a whole number of ranks, 1 or more; otherwise a UserError that
// says so.
int parse_world_size(const std::string& text);

// Logs the report for `world_size` ranks of the model `config` describes (built afresh on the
// CPU, without starting MPI or a device: its trainable parameters and units are counted) and,
// if `json_path` is not empty, writes it there. Throws UserError when the configured strategy
// cannot run at `world_size` ranks. `imagined_world` (--world-size, where no ranks start and
// so no banner is printed): the report opens with what the start-up would say of that world,
// its global batch and, for ps, the plan of chunks on servers.
void report_memory_plan(const Config& config, int world_size, const std::string& json_path,
                        bool imagined_world);

}  // namespace dtrain::trainer
