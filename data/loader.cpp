#include "data/loader.h"

#include "common/error.h"
#include "data/resample_device.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dtrain::data {
namespace {

// Pinned when the batch goes to a GPU: the copy is then non_blocking.
torch::TensorOptions host_options(torch::Dtype dtype, const torch::Device& device) {
  return torch::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda());
}

}  // namespace

class Loader::Impl {
 public:
  Impl(std::shared_ptr<const Dataset> dataset, const ShardedSampler& sampler,
       LoaderOptions options, torch::Device device);
  ~Impl() { stop(); }

  void start(int64_t epoch, int64_t first_step);
  bool next(Batch& batch);
  LoaderStats take_stats();

 private:
  struct Slot {
    Batch host;  // [n, C, H, W] float32 (not with finish_on_device) and [n] int64, on the host
    // finish_on_device: the samples' regions and geometry, as bytes (Dataset::stage)
    torch::Tensor pixels;
    torch::Tensor geometry;
    std::exception_ptr error;
  };

  Slot make(int64_t item);
  void make_samples(const std::vector<int64_t>& indices, Slot& slot) const;
  void stage_samples(const std::vector<int64_t>& indices, Slot& slot) const;
  uint64_t sample_seed(int64_t index) const;
  int64_t checked_label(int64_t index, int64_t label) const;
  void work();
  void stop();
  Batch to_device(Batch host) const;
  void make_device_batch();

  std::shared_ptr<const Dataset> dataset_;
  const ShardedSampler& sampler_;
  LoaderOptions options_;
  torch::Device device_;
  SampleShape shape_;
  Batch device_batch_;  // on_device datasets: the one batch handed out every micro-step

  // The epoch being produced; written by start() before any worker exists.
  int64_t epoch_ = -1;
  int64_t first_step_ = 0;
  int64_t num_items_ = 0;  // micro-batches from first_step_ to the end of the epoch
  // Guarded by mutex_ while workers run (written only by the caller's thread).
  int64_t returned_ = 0;
  int64_t claimed_ = 0;
  bool stopping_ = false;
  std::map<int64_t, Slot> ready_;
  std::atomic<bool> cancel_{false};  // workers abandon the batch they are on
  std::atomic<int64_t> images_made_{0};
  std::atomic<int64_t> worker_nanoseconds_{0};
  std::mutex mutex_;
  std::condition_variable produced_;
  std::condition_variable consumed_;
  std::vector<std::thread> workers_;
};

Loader::Impl::Impl(std::shared_ptr<const Dataset> dataset, const ShardedSampler& sampler,
                   LoaderOptions options, torch::Device device)
    : dataset_(std::move(dataset)), sampler_(sampler), options_(options), device_(device),
      shape_(dataset_->shape()) {
  DTRAIN_CHECK(options_.num_workers >= 0 && options_.prefetch >= 1,
               "num_workers {} prefetch {}", options_.num_workers, options_.prefetch);
  DTRAIN_CHECK(sampler_.options().dataset_size == dataset_->size(),
               "sampler over {} samples for a dataset of {}", sampler_.options().dataset_size,
               dataset_->size());
  DTRAIN_CHECK(!options_.finish_on_device || (dataset_->stages_samples() && device_.is_cuda() &&
                                              can_resample_on_device()),
               "finish_on_device needs a dataset that stages samples, a CUDA device and the "
               "resampling kernel");
  if (dataset_->on_device()) make_device_batch();
}

// Like the PyTorch benchmark scripts: one random batch made on the device, no host work.
void Loader::Impl::make_device_batch() {
  const int64_t b = sampler_.options().batch_size;
  const auto on_device = torch::TensorOptions().device(device_);
  device_batch_.images = torch::randn({b, shape_.channels, shape_.height, shape_.width},
                                      on_device.dtype(torch::kFloat32));
  device_batch_.labels =
      torch::randint(dataset_->num_classes(), {b}, on_device.dtype(torch::kInt64));
  if (options_.channels_last) {
    device_batch_.images = device_batch_.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
}

void Loader::Impl::start(int64_t epoch, int64_t first_step) {
  stop();
  const int64_t steps = sampler_.steps_per_epoch();
  DTRAIN_CHECK(epoch >= 0 && first_step >= 0 && first_step <= steps,
               "epoch {} first_step {} of {} steps", epoch, first_step, steps);
  epoch_ = epoch;
  first_step_ = first_step;
  num_items_ = (steps - first_step) * sampler_.options().grad_accum;
  returned_ = 0;
  claimed_ = 0;
  if (dataset_->on_device()) return;
  const int64_t num_workers = std::min(options_.num_workers, num_items_);
  for (int64_t w = 0; w < num_workers; ++w) workers_.emplace_back([this] { work(); });
}

void Loader::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cancel_ = true;
  consumed_.notify_all();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  ready_.clear();
  stopping_ = false;
  cancel_ = false;
}

void Loader::Impl::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    consumed_.wait(lock, [this] {
      return stopping_ || claimed_ >= num_items_ || claimed_ < returned_ + options_.prefetch;
    });
    if (stopping_ || claimed_ >= num_items_) return;
    const int64_t item = claimed_++;
    lock.unlock();
    Slot slot = make(item);
    lock.lock();
    ready_.emplace(item, std::move(slot));
    produced_.notify_all();
  }
}

// Micro-batch `item` of the epoch on the host; a failure is kept in the slot for next().
Loader::Impl::Slot Loader::Impl::make(int64_t item) {
  const auto start = std::chrono::steady_clock::now();
  Slot slot;
  try {
    const int64_t accum = sampler_.options().grad_accum;
    const std::vector<int64_t> indices =
        sampler_.indices(epoch_, first_step_ + item / accum, item % accum);
    if (options_.finish_on_device) {
      stage_samples(indices, slot);
    } else {
      make_samples(indices, slot);
    }
    images_made_ += static_cast<int64_t>(indices.size());
  } catch (...) {
    slot.error = std::current_exception();
  }
  worker_nanoseconds_ += std::chrono::duration_cast<std::chrono::nanoseconds>(
                             std::chrono::steady_clock::now() - start)
                             .count();
  return slot;
}

// Sample `index`'s seed: a function of the run's seed, the epoch and the index alone.
uint64_t Loader::Impl::sample_seed(int64_t index) const {
  return mix_seed(options_.seed, static_cast<uint64_t>(epoch_), static_cast<uint64_t>(index));
}

int64_t Loader::Impl::checked_label(int64_t index, int64_t label) const {
  DTRAIN_CHECK(label >= 0 && label < dataset_->num_classes(),
               "sample {} has label {} of {} classes", index, label, dataset_->num_classes());
  return label;
}

// The finished samples: [n, C, H, W] float32 and their labels.
void Loader::Impl::make_samples(const std::vector<int64_t>& indices, Slot& slot) const {
  const auto n = static_cast<int64_t>(indices.size());
  slot.host.images = torch::empty({n, shape_.channels, shape_.height, shape_.width},
                                  host_options(torch::kFloat32, device_));
  slot.host.labels = torch::empty({n}, host_options(torch::kInt64, device_));
  float* images = slot.host.images.data_ptr<float>();
  int64_t* labels = slot.host.labels.data_ptr<int64_t>();
  const int64_t numel = shape_.numel();
  for (int64_t i = 0; i < n; ++i) {
    if (cancel_.load(std::memory_order_relaxed)) break;  // stop() discards this batch
    const int64_t index = indices[static_cast<size_t>(i)];
    labels[i] = checked_label(index, dataset_->get(index, images + i * numel, sample_seed(index)));
  }
}

// The decoded regions, packed one after another, and their geometry: the device finishes them.
void Loader::Impl::stage_samples(const std::vector<int64_t>& indices, Slot& slot) const {
  const size_t n = indices.size();
  std::vector<StagedSample> samples(n);
  int64_t bytes = 0;
  for (size_t i = 0; i < n; ++i) {
    if (cancel_.load(std::memory_order_relaxed)) return;  // stop() discards this batch
    dataset_->stage(indices[i], sample_seed(indices[i]), samples[i]);
    checked_label(indices[i], samples[i].geometry.label);
    samples[i].geometry.offset = bytes;
    bytes += static_cast<int64_t>(samples[i].pixels.size());
  }
  const auto count = static_cast<int64_t>(n);
  slot.pixels = torch::empty({bytes}, host_options(torch::kUInt8, device_));
  slot.geometry = torch::empty({count * static_cast<int64_t>(sizeof(ResampleGeometry))},
                               host_options(torch::kUInt8, device_));
  slot.host.labels = torch::empty({count}, host_options(torch::kInt64, device_));
  auto* geometry = reinterpret_cast<ResampleGeometry*>(slot.geometry.data_ptr<uint8_t>());
  for (size_t i = 0; i < n; ++i) {
    const StagedSample& sample = samples[i];
    std::memcpy(slot.pixels.data_ptr<uint8_t>() + sample.geometry.offset, sample.pixels.data(),
                sample.pixels.size());
    geometry[i] = sample.geometry;
    slot.host.labels.data_ptr<int64_t>()[i] = sample.geometry.label;
  }
}

LoaderStats Loader::Impl::take_stats() {
  LoaderStats stats;
  stats.images = images_made_.exchange(0);
  stats.worker_seconds = 1e-9 * static_cast<double>(worker_nanoseconds_.exchange(0));
  return stats;
}

bool Loader::Impl::next(Batch& batch) {
  DTRAIN_CHECK(epoch_ >= 0, "Loader::next() before start_epoch()");
  if (returned_ >= num_items_) return false;
  const int64_t item = returned_;
  if (dataset_->on_device()) {
    const int64_t accum = sampler_.options().grad_accum;
    const int64_t n = sampler_.batch_count(first_step_ + item / accum, item % accum);
    ++returned_;
    batch = device_batch_;
    if (n < device_batch_.images.size(0)) {
      batch.images = batch.images.narrow(0, 0, n);
      batch.labels = batch.labels.narrow(0, 0, n);
    }
    return true;
  }
  Slot slot;
  if (workers_.empty()) {
    slot = make(item);
    ++returned_;
  } else {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      produced_.wait(lock, [this, item] { return ready_.count(item) > 0; });
      const auto found = ready_.find(item);
      slot = std::move(found->second);
      ready_.erase(found);
      ++returned_;
    }
    consumed_.notify_all();
  }
  if (slot.error) std::rethrow_exception(slot.error);
  if (slot.pixels.defined()) {
    batch.images = resample_on_device(slot.pixels, slot.geometry, device_, shape_.height,
                                      options_.channels_last);
    batch.labels = slot.host.labels.to(device_, /*non_blocking=*/true);
    return true;
  }
  batch = to_device(std::move(slot.host));
  return true;
}

Batch Loader::Impl::to_device(Batch host) const {
  if (!device_.is_cpu()) {
    // Pinned source: the copy is queued on the current stream and returns at once.
    host.images = host.images.to(device_, /*non_blocking=*/true);
    host.labels = host.labels.to(device_, /*non_blocking=*/true);
  }
  if (options_.channels_last) {
    host.images = host.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
  return host;
}

Loader::Loader(std::shared_ptr<const Dataset> dataset, ShardedSampler sampler,
               LoaderOptions options, torch::Device device)
    : sampler_(std::move(sampler)) {
  impl_ = std::make_unique<Impl>(std::move(dataset), sampler_, options, device);
}

// Workers read sampler_: stop them before the members go.
Loader::~Loader() { impl_.reset(); }

void Loader::start_epoch(int64_t epoch, int64_t first_step) { impl_->start(epoch, first_step); }

bool Loader::next(Batch& batch) { return impl_->next(batch); }

LoaderStats Loader::take_stats() { return impl_->take_stats(); }

}  // namespace dtrain::data
