#include "data/loader.h"

#include "common/error.h"

#include <atomic>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

namespace dtrain::data {

class Loader::Impl {
 public:
  Impl(std::shared_ptr<const Dataset> dataset, const ShardedSampler& sampler,
       LoaderOptions options, torch::Device device);
  ~Impl() { stop(); }

  void start(int64_t epoch, int64_t first_step);
  bool next(Batch& batch);

 private:
  struct Slot {
    Batch host;  // [n, C, H, W] float32 and [n] int64, on the host
    std::exception_ptr error;
  };

  Slot make(int64_t item) const;
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
Loader::Impl::Slot Loader::Impl::make(int64_t item) const {
  Slot slot;
  try {
    const int64_t accum = sampler_.options().grad_accum;
    const std::vector<int64_t> indices =
        sampler_.indices(epoch_, first_step_ + item / accum, item % accum);
    const auto n = static_cast<int64_t>(indices.size());
    auto host = torch::TensorOptions().dtype(torch::kFloat32);
    if (device_.is_cuda()) host = host.pinned_memory(true);  // for the non_blocking copy
    slot.host.images = torch::empty({n, shape_.channels, shape_.height, shape_.width}, host);
    slot.host.labels = torch::empty({n}, host.dtype(torch::kInt64));
    float* images = slot.host.images.data_ptr<float>();
    int64_t* labels = slot.host.labels.data_ptr<int64_t>();
    const int64_t numel = shape_.numel();
    const int64_t num_classes = dataset_->num_classes();
    for (int64_t i = 0; i < n; ++i) {
      if (cancel_.load(std::memory_order_relaxed)) break;  // stop() discards this batch
      const int64_t index = indices[static_cast<size_t>(i)];
      const uint64_t seed = mix_seed(options_.seed, static_cast<uint64_t>(epoch_),
                                     static_cast<uint64_t>(index));
      const int64_t label = dataset_->get(index, images + i * numel, seed);
      DTRAIN_CHECK(label >= 0 && label < num_classes, "sample {} has label {} of {} classes",
                   index, label, num_classes);
      labels[i] = label;
    }
  } catch (...) {
    slot.error = std::current_exception();
  }
  return slot;
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

}  // namespace dtrain::data
