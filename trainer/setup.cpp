#include "trainer/setup.h"

#include "common/error.h"
#include "common/log.h"
#include "data/dataset.h"
#include "data/resample_device.h"
#include "dist/agreement.h"
#include "dist/factory.h"
#include "dist/placement.h"
#include "dist/sync_batchnorm.h"
#include "trainer/config.h"
#include "trainer/kernel_warmup.h"
#include "trainer/run_dir.h"
#include "trainer/version.h"
#include "models/batch_norm.h"
#include "models/registry.h"
#include "optim/optimizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/cuda.h>
#include <torch/version.h>
#ifdef DTRAIN_CUDA
#include <c10/cuda/CUDAFunctions.h>
#endif

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <thread>

namespace dtrain::trainer {

torch::Device resolve_device(const std::string& requested, int local_rank) {
  const bool have_cuda = torch::cuda::is_available();
  if (requested == "cuda" && !have_cuda) {
    throw UserError(
        "run.device = \"cuda\", but no CUDA device is usable (no GPU, or this LibTorch has no "
        "CUDA); use run.device = \"cpu\" or \"auto\"");
  }
  if (requested == "cpu" || !have_cuda) return torch::kCPU;
  const auto index = static_cast<c10::DeviceIndex>(local_rank % torch::cuda::device_count());
#ifdef DTRAIN_CUDA
  c10::cuda::set_device(index);  // NCCL, cuDNN handles and default streams follow it
#endif
  return torch::Device(torch::kCUDA, index);
}

namespace {

// 0: the machine's cores shared among the ranks on it.
void set_threads(int64_t requested, int ranks_here) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  const int64_t share = std::max<int64_t>(1, cores / ranks_here);
  torch::set_num_threads(static_cast<int>(requested > 0 ? requested : share));
}

// The resolved config as "section.key = value" lines, for comparing ranks.
std::vector<std::string> config_lines(const Config& config) {
  std::istringstream text(to_toml(config));
  std::vector<std::string> lines;
  std::string section;
  for (std::string line; std::getline(text, line);) {
    if (line.empty()) continue;
    if (line.front() == '[') {
      section = line.substr(1, line.find(']') - 1);
    } else {
      lines.push_back(section + "." + line);
    }
  }
  return lines;
}

// "name = [sizes] dtype" for every parameter and buffer.
std::vector<std::string> model_lines(torch::nn::Module& model) {
  std::vector<std::string> lines;
  auto add = [&lines](const std::string& name, const torch::Tensor& tensor) {
    lines.push_back(fmt::format("{} = {} {}", name, fmt::join(tensor.sizes(), "x"),
                                c10::toString(tensor.scalar_type())));
  };
  for (const auto& item : model.named_parameters()) add(item.key(), item.value());
  for (const auto& item : model.named_buffers()) add(item.key(), item.value());
  return lines;
}

// debug.slow_ranks and debug.nan_loss_ranks name world ranks: each must be one of this run's.
void check_debug_ranks(const DebugOptions& debug, int world_size) {
  const auto check = [world_size](const std::vector<int64_t>& ranks, const char* key) {
    for (const int64_t rank : ranks) {
      if (rank >= world_size) {
        throw UserError(fmt::format("debug.{}: rank {} is not in this world of {} rank(s); "
                                    "name ranks below {}, or start mpirun -np {}",
                                    key, rank, world_size, world_size, rank + 1));
      }
    }
  };
  check(debug.slow_ranks, "slow_ranks");
  check(debug.nan_loss_ranks, "nan_loss_ranks");
}

}  // namespace

void check_world(const Config& config, int world_size) {
  check_debug_ranks(config.debug, world_size);
  const bool on_gpus = config.run.device == "cuda" ||
                       (config.run.device == "auto" && torch::cuda::is_available());
  dist::check_strategy(config.dist, world_size, on_gpus);
}

namespace {

void to_channels_last(torch::nn::Module& model) {
  for (torch::Tensor& param : model.parameters()) {
    if (param.dim() == 4) param.set_data(param.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

// data.image_transform: whether the device resizes, crops, flips and normalises image batches.
bool finish_on_device(const data::DataOptions& options, const data::Dataset& dataset,
                      const torch::Device& device) {
  const bool possible = dataset.stages_samples() && device.is_cuda() &&
                        data::can_resample_on_device();
  if (options.image_transform == "device" && !possible) {
    throw UserError(fmt::format(
        "data.image_transform = \"device\": {}; set it to \"host\" or \"auto\"",
        !dataset.stages_samples() ? "only image_folder datasets are transformed on the device"
        : !device.is_cuda()       ? "training does not run on a CUDA device"
                                  : "this build has no CUDA resampling kernel (no nvcc when it "
                                    "was built)"));
  }
  return options.image_transform != "host" && possible;
}

// The batch sizes this rank evaluates: data.eval_batch_size, and what the last step leaves.
std::vector<int64_t> eval_batch_sizes(const Config& config, const data::Dataset* test_set,
                                      const dist::DataGroup& group) {
  if (test_set == nullptr) return {};
  data::SamplerOptions sampling;
  sampling.dataset_size = test_set->size();
  sampling.batch_size = config.data.eval_batch_size;
  sampling.rank = group.rank;
  sampling.world_size = group.size;
  sampling.drop_last = false;
  const data::ShardedSampler sampler(sampling);
  std::vector<int64_t> sizes;
  for (const int64_t step : {int64_t{0}, sampler.steps_per_epoch() - 1}) {
    const int64_t n = step < 0 ? 0 : sampler.batch_count(step, 0);
    if (n > 0 && std::find(sizes.begin(), sizes.end(), n) == sizes.end()) sizes.push_back(n);
  }
  return sizes;
}

std::unique_ptr<data::Loader> make_loader(std::shared_ptr<const data::Dataset> dataset,
                                          const Config& config, data::Split split,
                                          const dist::DataGroup& group, torch::Device device) {
  data::SamplerOptions sampling;
  sampling.dataset_size = dataset->size();
  sampling.seed = static_cast<uint64_t>(config.run.seed);
  sampling.rank = group.rank;
  sampling.world_size = group.size;
  if (split == data::Split::kTrain) {
    sampling.batch_size = config.data.batch_size;
    sampling.grad_accum = config.train.grad_accum;
    sampling.shuffle = config.data.shuffle;
    sampling.drop_last = true;
  } else {
    sampling.batch_size = config.data.eval_batch_size;
    sampling.shuffle = false;
    sampling.drop_last = false;
  }
  data::LoaderOptions loading;
  loading.num_workers = config.data.num_workers;
  loading.prefetch = config.data.prefetch;
  loading.seed = sampling.seed;
  loading.channels_last = config.train.channels_last;
  loading.finish_on_device = finish_on_device(config.data, *dataset, device);
  return std::make_unique<data::Loader>(std::move(dataset), data::ShardedSampler(sampling),
                                        loading, device);
}

}  // namespace

RunSetup build_run(const Config& config) {
  // One hardware work queue per GPU, unless the environment says otherwise: with several, the
  // communication stream's queue slowed every compute kernel launch (1.1 of 1.2 ms a step of
  // DDP's overhead on ResNet-50, docs/PERFORMANCE.md). Not for SSP over collectives: in one
  // queue, the servers' wait for a slow worker's pushes holds up every compute kernel queued
  // behind it, and the slack is gone (a worker slowed 1.5x every other step: 5,392 img/s with
  // one queue, 6,083 with eight, 2 x H200). CUDA reads it when it starts, so before MPI
  // (which may start CUDA) and before any device query.
  const dist::PsOptions& ps = config.dist.ps;
  const bool ssp_over_collectives = config.dist.strategy == dist::StrategyKind::kPs &&
                                    ps.consistency == "ssp" && ps.staleness > 0 &&
                                    ps.use_collectives(/*on_gpus=*/true);
  // Over point-to-point links every stream needs a queue of its own: a receive posted before
  // its peer's send would otherwise hold up the work queued behind it. And every kernel is
  // loaded at start: a kernel loaded at its first launch waits for all the GPU's work, a
  // receive that waits for a peer doing the same included (dist/ps/peer.h).
  const bool p2p = config.dist.strategy == dist::StrategyKind::kPs &&
                   dist::ps_uses_p2p(ps, /*on_gpus=*/true);
  if (p2p) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
    setenv("CUDA_MODULE_LOADING", "EAGER", /*overwrite=*/0);
  } else if (!ssp_over_collectives) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "1", /*overwrite=*/0);
  }
  RunSetup setup;
  setup.world = dist::init_world_within(config.dist.timeout_s);
  log::configure(setup.world.rank, log::Level::kInfo);
  // The CPU world: agreement checks now, the gradients of CPU ranks later.
  std::shared_ptr<dist::Communicator> control = dist::make_mpi_world(config.dist.timeout_s);
  dist::check_same_on_all_ranks(*control, "resolved config", config_lines(config));
  check_debug_ranks(config.debug, setup.world.size);
  // A host-only rank (a dedicated parameter server) takes no GPU. The ranks that compute come
  // first in the world, so on each node their local ranks number them: 4 workers and a server
  // on a 4-GPU machine take one GPU each.
  setup.placement = dist::place_ranks(config.dist, setup.world.size);
  const bool host_only = setup.placement.host_only(setup.world.rank);
  setup.device = host_only ? torch::Device(torch::kCPU)
                           : resolve_device(config.run.device, setup.world.local_rank);
  if (config.train.precision != "fp32" && !setup.device.is_cuda() && !host_only) {
    throw UserError(fmt::format("train.precision = \"{}\" needs CUDA, and this run is on CPU; "
                                "use \"fp32\"",
                                config.train.precision));
  }
  if (config.train.cuda_graph == "on" && !setup.device.is_cuda()) {
    throw UserError("train.cuda_graph = \"on\" needs CUDA, and this run is on CPU; use \"auto\"");
  }
  set_threads(config.run.num_threads, setup.world.local_size);
  // Let cuDNN pick the fastest convolution algorithms for our fixed shapes, as PyTorch
  // training scripts do with torch.backends.cudnn.benchmark = True.
  if (setup.device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
  setup.run_dir = run_dir_of(config);

  const data::Splits splits = data::open_splits(config.data);
  const std::shared_ptr<const data::Dataset>& train_set = splits.train;
  const std::shared_ptr<const data::Dataset>& test_set = splits.test;

  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  const data::SampleShape shape = train_set->shape();
  setup.model = models::make_model(config.model, {shape.channels, shape.height, shape.width},
                                   train_set->num_classes());
  setup.model->to(setup.device);
  if (config.train.channels_last) to_channels_last(*setup.model);

  dist::check_same_on_all_ranks(*control, "model parameters and buffers",
                                model_lines(*setup.model));

  // On GPUs, NCCL over the ranks that compute: host-only ranks have no GPU to join it with.
  setup.comm = setup.device.is_cpu()
                   ? control
                   : dist::make_device_communicator(setup.device, config.dist.timeout_s,
                                                    setup.placement.num_device_ranks);
  setup.strategy = dist::make_strategy(config.dist, setup.comm);
  // The strategy decides which ranks take data: the sampler shards over its data group, and
  // SyncBatchNorm's statistics are those of the group's batch.
  const dist::DataGroup group = setup.strategy->data_group();
  if (config.model.sync_batchnorm && group.size > 1) {
    const int64_t layers = models::set_batchnorm_training_forward(
        *setup.model, dist::sync_batchnorm_forward(group.comm));
    log::info("SyncBatchNorm: {} BatchNorm layers use the global batch's statistics", layers);
  }
  if (p2p && setup.device.is_cuda()) {
    warm_up_kernels(*setup.model, config, {shape.channels, shape.height, shape.width},
                    eval_batch_sizes(config, test_set.get(), group), setup.device);
  }
  const optim::OptimizerOptions optimizer_options = config.optim;
  setup.strategy->attach(*setup.model, [optimizer_options](const std::vector<torch::Tensor>& p) {
    return optim::make_optimizer(optimizer_options, p);
  });

  if (setup.strategy->role() == dist::Role::kServer) return setup;  // it takes no data
  setup.train_loader = make_loader(train_set, config, data::Split::kTrain, group, setup.device);
  if (test_set) {
    setup.test_loader = make_loader(test_set, config, data::Split::kTest, group, setup.device);
  }
  setup.steps_per_epoch = setup.train_loader->sampler().steps_per_epoch();
  if (setup.steps_per_epoch == 0) {
    throw UserError(fmt::format(
        "data.batch_size {} x grad_accum {} x {} rank(s) = global batch {} exceeds the {} "
        "training samples; use a smaller data.batch_size",
        config.data.batch_size, config.train.grad_accum, group.size,
        setup.train_loader->sampler().global_batch(), train_set->size()));
  }
  setup.images_per_step = setup.train_loader->sampler().global_batch();
  setup.total_steps = config.train.max_steps > 0 ? config.train.max_steps
                                                 : config.train.epochs * setup.steps_per_epoch;
  setup.schedule = std::make_unique<optim::LrSchedule>(config.schedule, config.optim.lr,
                                                       setup.steps_per_epoch, setup.total_steps);
  // A run cut short by train.max_steps (a smoke test) is meant to end early; one of whole
  // epochs that never finishes its warmup or reaches a milestone is a config mistake.
  if (setup.world.rank == 0 && config.train.max_steps == 0) {
    for (const std::string& line : setup.schedule->unreached()) log::warn("{}", line);
  }
  if (setup.world.rank == 0 && config.dist.strategy == dist::StrategyKind::kPs) {
    for (const std::string& line : config.dist.ps.run_warnings(group.size, setup.total_steps)) {
      log::warn("{}", line);
    }
  }
  return setup;
}

namespace {

// " | host-only ranks 4-5" where some ranks take no data and hold no device.
std::string host_only_ranks(const RunSetup& setup) {
  const int first = setup.placement.num_device_ranks;
  const int last = setup.world.size - 1;
  if (first > last) return "";
  if (first == last) return fmt::format(" | host-only rank {}", first);
  return fmt::format(" | host-only ranks {}-{}", first, last);
}

}  // namespace

std::string describe_run(const Config& config, const RunSetup& setup) {
  int64_t num_params = 0;
  for (const torch::Tensor& param : setup.model->parameters()) num_params += param.numel();
  std::string cuda = "no";
#ifdef DTRAIN_CUDA
  cuda = fmt::format("yes ({} device(s) visible)", torch::cuda::device_count());
#endif
#ifdef DTRAIN_IMAGE_CODECS
  const char* images = "yes";
#else
  const char* images = "no";
#endif
  // What crosses the link, where the strategy lets the config choose it.
  std::string gradients;
  if (config.dist.strategy == dist::StrategyKind::kDdp && config.dist.ddp.reduce_dtype == "bf16") {
    gradients = " (gradients all-reduced in bf16)";
  }
  return fmt::format(
      "dtrain {} | LibTorch {} | CUDA build {} | JPEG/PNG {}\n"
      "run {} -> {}\n"
      "{} rank(s) on {} node(s) | device {}{} | {} torch threads | strategy {}{}\n"
      "model {} ({} parameters) | data {} | precision {}{}\n"
      "global batch {} ({} rank(s) x {} x {} micro-steps) | {} steps/epoch | {} steps",
      dtrain_version(), TORCH_VERSION, cuda, images, config.run.name, setup.run_dir,
      setup.world.size, setup.world.num_nodes, setup.device.str(), host_only_ranks(setup),
      torch::get_num_threads(),
      dist::describe_strategy(config.dist), gradients, config.model.name, num_params,
      config.data.dataset, config.train.precision,
      config.train.channels_last ? " | channels_last" : "", setup.images_per_step,
      setup.strategy->data_group().size, config.data.batch_size, config.train.grad_accum,
      setup.steps_per_epoch, setup.total_steps);
}

}  // namespace dtrain::trainer
