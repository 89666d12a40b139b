#include "trainer/config_schema.h"

#include <fmt/format.h>

#include <cstdint>
#include <limits>

namespace dtrain::trainer {

namespace {

std::string type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::string: return "a string";
    case toml::node_type::integer: return "an integer";
    case toml::node_type::floating_point: return "a float";
    case toml::node_type::boolean: return "a boolean";
    case toml::node_type::array: return "an array";
    case toml::node_type::table: return "a table";
    default: return "a date/time";
  }
}

std::string expected(const char* what, const toml::node& node) {
  return fmt::format("expected {}, got {}", what, type_name(node));
}

ConfigKey option(std::string path, int64_t* field, std::string help) {
  return {std::move(path), "int", std::move(help),
          [field](const toml::node& node) -> std::string {
            if (!node.is_integer()) return expected("an integer", node);
            *field = node.as_integer()->get();
            return "";
          },
          [field](toml::table& table, const std::string& name) { table.insert(name, *field); }};
}

ConfigKey option(std::string path, double* field, std::string help) {
  return {std::move(path), "float", std::move(help),
          [field](const toml::node& node) -> std::string {
            if (node.is_integer()) {
              *field = static_cast<double>(node.as_integer()->get());
            } else if (node.is_floating_point()) {
              *field = node.as_floating_point()->get();
            } else {
              return expected("a number", node);
            }
            return "";
          },
          [field](toml::table& table, const std::string& name) { table.insert(name, *field); }};
}

ConfigKey option(std::string path, bool* field, std::string help) {
  return {std::move(path), "bool", std::move(help),
          [field](const toml::node& node) -> std::string {
            if (!node.is_boolean()) return expected("true or false", node);
            *field = node.as_boolean()->get();
            return "";
          },
          [field](toml::table& table, const std::string& name) { table.insert(name, *field); }};
}

ConfigKey option(std::string path, std::string* field, std::string help) {
  return {std::move(path), "string", std::move(help),
          [field](const toml::node& node) -> std::string {
            if (!node.is_string()) return expected("a string", node);
            *field = node.as_string()->get();
            return "";
          },
          [field](toml::table& table, const std::string& name) { table.insert(name, *field); }};
}

ConfigKey option(std::string path, std::vector<int64_t>* field, std::string help) {
  return {std::move(path), "int list", std::move(help),
          [field](const toml::node& node) -> std::string {
            const toml::array* array = node.as_array();
            if (array == nullptr) return expected("an array of integers", node);
            std::vector<int64_t> values;
            for (const toml::node& element : *array) {
              if (!element.is_integer()) return expected("an array of integers", node);
              values.push_back(element.as_integer()->get());
            }
            *field = std::move(values);
            return "";
          },
          [field](toml::table& table, const std::string& name) {
            toml::array array;
            for (int64_t value : *field) array.push_back(value);
            table.insert(name, std::move(array));
          }};
}

}  // namespace

std::vector<ConfigKey> config_keys(Config& c) {
  return {
      option("run.name", &c.run.name, "run name; outputs go to out_dir/name/"),
      option("run.out_dir", &c.run.out_dir, "directory holding the runs"),
      option("run.seed", &c.run.seed, "seeds weights, data order and augmentation"),
      option("run.device", &c.run.device, "\"auto\" (CUDA when available), \"cpu\" or \"cuda\""),
      option("run.num_threads", &c.run.num_threads,
           "torch threads per rank; 0: cores divided by the ranks on this machine"),
      option("run.log_every", &c.run.log_every, "steps between progress lines and step metrics"),
      option("run.profile_start", &c.run.profile_start, "first step profiled (run.profile_steps)"),
      option("run.profile_steps", &c.run.profile_steps,
           "steps traced by the Kineto profiler (CUDA LibTorch) into trace.rankN.json; 0 = off"),

      option("train.epochs", &c.train.epochs, "epochs to train"),
      option("train.max_steps", &c.train.max_steps, "stop after this many steps (0: all epochs)"),
      option("train.grad_accum", &c.train.grad_accum, "micro-steps accumulated per optimizer step"),
      option("train.label_smoothing", &c.train.label_smoothing,
           "training loss against (1 - e) one-hot + e uniform targets; 0 = off"),
      option("train.precision", &c.train.precision,
           "\"fp32\", or autocast \"bf16\" / \"fp16\" (CUDA; fp16 with loss scaling)"),
      option("train.channels_last", &c.train.channels_last,
           "NHWC weights and activations (faster convolutions on CUDA)"),
      option("train.eval_every", &c.train.eval_every,
           "evaluate every this many epochs (0: only at the end)"),
      option("train.checkpoint_every", &c.train.checkpoint_every,
           "checkpoint every this many steps (0: at the end of every epoch)"),
      option("train.keep_checkpoints", &c.train.keep_checkpoints,
           "complete checkpoints kept on disk (0: no checkpoints)"),

      option("model.name", &c.model.name, "\"simple_cnn\", \"resnet18\", \"resnet34\", \"resnet50\""),
      option("model.num_classes", &c.model.num_classes, "classes (0: the dataset's)"),
      option("model.stem", &c.model.stem,
           "ResNet stem: \"imagenet\" (7x7/2 + max-pool), \"small\" (3x3/1), \"auto\" (small "
           "up to 64 px)"),
      option("model.zero_init_residual", &c.model.zero_init_residual,
           "zero the last BatchNorm gamma of each residual block"),
      option("model.sync_batchnorm", &c.model.sync_batchnorm,
           "BatchNorm statistics over the global batch (all ranks) in training; costs one "
           "small all-gather and one small all-reduce per layer and step"),
      option("model.width", &c.model.width, "SimpleCNN channels of the first convolution"),

      option("data.dataset", &c.data.dataset,
           "\"fashion_mnist\", \"mnist\", \"cifar10\", \"image_folder\", \"synthetic\""),
      option("data.path", &c.data.path, "directory holding the dataset files"),
      option("data.batch_size", &c.data.batch_size,
           "images per rank per micro-step (global = batch_size x world x grad_accum)"),
      option("data.eval_batch_size", &c.data.eval_batch_size, "evaluation images per rank"),
      option("data.num_workers", &c.data.num_workers,
           "loader threads per rank (0: load on the training thread)"),
      option("data.prefetch", &c.data.prefetch, "batches prepared ahead of training"),
      option("data.shuffle", &c.data.shuffle, "reshuffle the training set every epoch"),
      option("data.augment", &c.data.augment,
           "training augmentation (crop + flip for CIFAR-10 and image folders)"),
      option("data.image_size", &c.data.image_size, "image_folder: training crop side in pixels"),
      option("data.synthetic_samples", &c.data.synthetic_samples, "synthetic: samples per epoch"),
      option("data.synthetic_classes", &c.data.synthetic_classes, "synthetic: classes"),
      option("data.synthetic_channels", &c.data.synthetic_channels, "synthetic: image channels"),
      option("data.synthetic_image_size", &c.data.synthetic_image_size,
           "synthetic: image side in pixels"),

      option("optim.name", &c.optim.name, "\"sgd\", \"adamw\", \"lars\" or \"lamb\""),
      option("optim.lr", &c.optim.lr, "peak learning rate, reached at the end of warmup"),
      option("optim.momentum", &c.optim.momentum, "SGD momentum"),
      option("optim.nesterov", &c.optim.nesterov, "SGD with Nesterov momentum"),
      option("optim.weight_decay", &c.optim.weight_decay,
           "L2 (SGD) or decoupled (AdamW) weight decay"),
      option("optim.decay_norm_and_bias", &c.optim.decay_norm_and_bias,
           "apply weight decay to 1-D tensors (biases, normalisation) too"),
      option("optim.beta1", &c.optim.beta1, "AdamW first-moment decay"),
      option("optim.beta2", &c.optim.beta2, "AdamW second-moment decay"),
      option("optim.eps", &c.optim.eps, "AdamW denominator epsilon"),
      option("optim.adapt_norm_and_bias", &c.optim.adapt_norm_and_bias,
           "lars/lamb: trust-ratio adaptation for 1-D tensors too"),
      option("optim.trust_coefficient", &c.optim.trust_coefficient,
           "lars: eta of the trust ratio eta norm(w) / (norm(g) + wd norm(w) + trust_eps)"),
      option("optim.trust_eps", &c.optim.trust_eps, "lars/lamb: trust-ratio denominator epsilon"),
      option("optim.max_trust_ratio", &c.optim.max_trust_ratio,
           "lars/lamb: upper clamp of the trust ratio; 0 = off"),
      option("optim.max_grad_norm", &c.optim.max_grad_norm,
           "lamb: global gradient-norm clipping before the moments; 0 = off"),

      option("schedule.decay", &c.schedule.decay,
           "after warmup: \"cosine\" (to min_lr), \"poly\" (to min_lr as (1 - t/T)^power), "
           "\"step\" (x gamma at milestones), \"constant\""),
      option("schedule.warmup_epochs", &c.schedule.warmup_epochs,
           "linear warmup length in epochs (fractions allowed)"),
      option("schedule.warmup_start_factor", &c.schedule.warmup_start_factor,
           "warmup starts at lr x this factor"),
      option("schedule.milestones", &c.schedule.milestones, "step decay: epochs where lr x= gamma"),
      option("schedule.gamma", &c.schedule.gamma, "step decay factor"),
      option("schedule.min_lr", &c.schedule.min_lr, "cosine and poly decay floor"),
      option("schedule.power", &c.schedule.power, "poly decay exponent"),

      option("dist.strategy", &c.dist.strategy,
           "how ranks cooperate: \"single\" (one rank), \"ddp\" (data parallel) or \"zero\" "
           "(data parallel, optimizer state sharded over the ranks)"),
      option("dist.timeout_s", &c.dist.timeout_s,
           "bound on any collective; a rank that never joins ends the job"),
      option("dist.ddp.bucket_mb", &c.dist.ddp.bucket_mb, "gradient MiB per all-reduce bucket"),
      option("dist.ddp.first_bucket_mb", &c.dist.ddp.first_bucket_mb,
           "MiB of the first bucket (last layers, ready first): small, to start early"),
      option("dist.ddp.overlap", &c.dist.ddp.overlap,
           "all-reduce buckets during backward (false: after it)"),
      option("dist.ddp.buffers", &c.dist.ddp.buffers,
           "BatchNorm statistics before each forward: \"broadcast\" from rank 0, "
           "\"average\" over ranks, or \"local\""),
      option("dist.ddp.find_unused", &c.dist.ddp.find_unused,
           "reduce parameters that got no gradient as zeros instead of stopping"),
      option("dist.zero.stage", &c.dist.zero.stage,
           "ZeRO stage: 1 shards the optimizer state (stages 2 and 3 are not built yet)"),
  };
}

}  // namespace dtrain::trainer
