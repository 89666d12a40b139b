// Everything a run needs, built once from the Config before the first step.
#pragma once

#include "data/loader.h"
#include "dist/comm/communicator.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/placement.h"
#include "dist/strategy.h"
#include "models/model.h"
#include "optim/schedule.h"
#include "trainer/options.h"

#include <torch/torch.h>

#include <memory>
#include <string>

namespace dtrain::trainer {

struct RunSetup {
  dist::WorldInfo world;
  // Which ranks compute on run.device and which hold state in host memory only.
  dist::RankPlacement placement;
  torch::Device device = torch::kCPU;
  // The world on `device`'s tensors: MPI for CPU; NCCL for CUDA, over the ranks that compute
  // (placement.num_device_ranks; every rank but dedicated parameter servers).
  std::shared_ptr<dist::Communicator> comm;
  std::string run_dir;
  std::shared_ptr<models::Model> model;
  std::unique_ptr<dist::Strategy> strategy;
  std::unique_ptr<data::Loader> train_loader;
  std::unique_ptr<data::Loader> test_loader;  // null for synthetic data
  std::unique_ptr<optim::LrSchedule> schedule;
  int64_t steps_per_epoch = 0;
  int64_t total_steps = 0;
  int64_t images_per_step = 0;  // global batch
};

// Resolves run.device for a rank that computes: "auto" takes CUDA when a device is visible; a
// CUDA rank takes the GPU local_rank % (visible GPUs) and makes it current. Host-only ranks
// (dist/placement.h) never call it.
torch::Device resolve_device(const std::string& requested, int local_rank);

// What the start-up refuses for a world of `world_size` ranks beyond the config's own checks
// (debug ranks outside it, a strategy its device does not serve): throws UserError. The real
// start-up checks the same as it builds the run; the dry run calls this for a world it only
// imagines.
void check_world(const Config& config, int world_size);

// Collective: every rank builds its part of the run and checks that all ranks agree on the
// resolved config and on the model's parameter names and shapes.
RunSetup build_run(const Config& config);

// The start-up banner: versions, device, model size, batch and step plan.
std::string describe_run(const Config& config, const RunSetup& setup);

}  // namespace dtrain::trainer
