#include "trainer/setup.h"

#include "common/error.h"
#include "data/dataset.h"
#include "dist/factory.h"
#include "models/registry.h"
#include "optim/optimizer.h"

#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <algorithm>
#include <filesystem>
#include <thread>

namespace dtrain::trainer {

torch::Device resolve_device(const std::string& requested) {
  const bool have_cuda = torch::cuda::is_available();
  if (requested == "cuda" && !have_cuda) {
    throw UserError(
        "run.device = \"cuda\", but no CUDA device is usable (no GPU, or this LibTorch has no "
        "CUDA); use run.device = \"cpu\" or \"auto\"");
  }
  if (requested == "cpu" || !have_cuda) return torch::kCPU;
  return torch::Device(torch::kCUDA, 0);
}

namespace {

void set_threads(int64_t requested) {
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  torch::set_num_threads(static_cast<int>(requested > 0 ? requested : cores));
}

void to_channels_last(torch::nn::Module& model) {
  for (torch::Tensor& param : model.parameters()) {
    if (param.dim() == 4) param.set_data(param.data().contiguous(at::MemoryFormat::ChannelsLast));
  }
}

std::unique_ptr<data::Loader> make_loader(std::shared_ptr<const data::Dataset> dataset,
                                          const Config& config, data::Split split,
                                          torch::Device device) {
  data::SamplerOptions sampling;
  sampling.dataset_size = dataset->size();
  sampling.seed = static_cast<uint64_t>(config.run.seed);
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
  return std::make_unique<data::Loader>(std::move(dataset), data::ShardedSampler(sampling),
                                        loading, device);
}

}  // namespace

RunSetup build_run(const Config& config) {
  RunSetup setup;
  setup.device = resolve_device(config.run.device);
  if (config.train.precision != "fp32" && !setup.device.is_cuda()) {
    throw UserError(fmt::format("train.precision = \"{}\" needs CUDA, and this run is on CPU; "
                                "use \"fp32\"",
                                config.train.precision));
  }
  set_threads(config.run.num_threads);
  // Let cuDNN pick the fastest convolution algorithms for our fixed shapes, as PyTorch
  // training scripts do with torch.backends.cudnn.benchmark = True.
  if (setup.device.is_cuda()) at::globalContext().setBenchmarkCuDNN(true);
  setup.run_dir = (std::filesystem::path(config.run.out_dir) / config.run.name).string();

  std::shared_ptr<const data::Dataset> train_set =
      data::open_dataset(config.data, data::Split::kTrain);
  std::shared_ptr<const data::Dataset> test_set;
  if (!train_set->on_device()) test_set = data::open_dataset(config.data, data::Split::kTest);

  torch::manual_seed(static_cast<uint64_t>(config.run.seed));
  const data::SampleShape shape = train_set->shape();
  setup.model = models::make_model(config.model, {shape.channels, shape.height, shape.width},
                                   train_set->num_classes());
  setup.model->to(setup.device);
  if (config.train.channels_last) to_channels_last(*setup.model);

  setup.strategy = dist::make_strategy(config.dist);
  const optim::OptimizerOptions optimizer_options = config.optim;
  setup.strategy->attach(*setup.model, [optimizer_options](const std::vector<torch::Tensor>& p) {
    return optim::make_optimizer(optimizer_options, p);
  });

  setup.train_loader = make_loader(train_set, config, data::Split::kTrain, setup.device);
  if (test_set) setup.test_loader = make_loader(test_set, config, data::Split::kTest, setup.device);
  setup.steps_per_epoch = setup.train_loader->sampler().steps_per_epoch();
  if (setup.steps_per_epoch == 0) {
    throw UserError(fmt::format(
        "data.batch_size {} x grad_accum {} = global batch {} exceeds the {} training samples; "
        "use a smaller data.batch_size",
        config.data.batch_size, config.train.grad_accum,
        setup.train_loader->sampler().global_batch(), train_set->size()));
  }
  setup.images_per_step = setup.train_loader->sampler().global_batch();
  setup.total_steps = config.train.max_steps > 0 ? config.train.max_steps
                                                 : config.train.epochs * setup.steps_per_epoch;
  setup.schedule = std::make_unique<optim::LrSchedule>(config.schedule, config.optim.lr,
                                                       setup.steps_per_epoch, setup.total_steps);
  return setup;
}

std::string describe_run(const Config& config, const RunSetup& setup) {
  int64_t num_params = 0;
  for (const torch::Tensor& param : setup.model->parameters()) num_params += param.numel();
  std::string cuda = "no";
#ifdef DTRAIN_CUDA
  cuda = fmt::format("yes ({} device(s) visible)", torch::cuda::device_count());
#endif
#ifdef DTRAIN_OPENCV
  const char* opencv = "yes";
#else
  const char* opencv = "no";
#endif
  return fmt::format(
      "dtrain | LibTorch {} | CUDA build {} | OpenCV {}\n"
      "run {} -> {}\n"
      "device {} | {} torch threads | strategy {}\n"
      "model {} ({} parameters) | data {} | precision {}{}\n"
      "global batch {} ({} x {} micro-steps) | {} steps/epoch | {} steps",
      TORCH_VERSION, cuda, opencv, config.run.name, setup.run_dir, setup.device.str(),
      torch::get_num_threads(), setup.strategy->name(), config.model.name, num_params,
      config.data.dataset, config.train.precision,
      config.train.channels_last ? " | channels_last" : "", setup.images_per_step,
      config.data.batch_size, config.train.grad_accum, setup.steps_per_epoch, setup.total_steps);
}

}  // namespace dtrain::trainer
