// The loader: order and content independent of the worker count, resume, prefetch bound,
// worker errors, shutdown mid-epoch, synthetic device batches.
#include "common/error.h"
#include "data/loader.h"

#include <catch2/catch.hpp>
#include <fmt/format.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

using dtrain::UserError;
using dtrain::data::Batch;
using dtrain::data::Dataset;
using dtrain::data::Loader;
using dtrain::data::LoaderOptions;
using dtrain::data::mix_seed;
using dtrain::data::SampleShape;
using dtrain::data::SamplerOptions;
using dtrain::data::ShardedSampler;

namespace {

constexpr uint64_t kSeedModulus = 1000003;  // seed % this is exact in float32

// Sample i: [index, seed % kSeedModulus, index + 0.5, ...]; label index % 10.
class FakeDataset : public Dataset {
 public:
  explicit FakeDataset(int64_t size, int64_t bad_index = -1, int sleep_us = 0)
      : size_(size), bad_index_(bad_index), sleep_us_(sleep_us) {}

  int64_t size() const override { return size_; }
  int64_t num_classes() const override { return 10; }
  SampleShape shape() const override { return {2, 2, 2}; }
  int64_t get(int64_t index, float* out, uint64_t seed) const override {
    ++calls;
    if (sleep_us_ > 0) std::this_thread::sleep_for(std::chrono::microseconds(sleep_us_));
    if (index == bad_index_) throw UserError(fmt::format("sample {}: corrupt", index));
    out[0] = static_cast<float>(index);
    out[1] = static_cast<float>(seed % kSeedModulus);
    for (int j = 2; j < 8; ++j) out[j] = static_cast<float>(index) + 0.5f * j;
    return index % 10;
  }

  mutable std::atomic<int64_t> calls{0};

 private:
  int64_t size_;
  int64_t bad_index_;
  int sleep_us_;
};

SamplerOptions sampler_options(int64_t size, int64_t batch, int64_t accum, int rank, int world,
                               bool drop_last, bool shuffle = true) {
  SamplerOptions options;
  options.dataset_size = size;
  options.batch_size = batch;
  options.grad_accum = accum;
  options.rank = rank;
  options.world_size = world;
  options.drop_last = drop_last;
  options.shuffle = shuffle;
  options.seed = 11;
  return options;
}

LoaderOptions loader_options(int64_t workers, int64_t prefetch) {
  LoaderOptions options;
  options.num_workers = workers;
  options.prefetch = prefetch;
  options.seed = 5;
  return options;
}

std::vector<Batch> drain(Loader& loader) {
  std::vector<Batch> batches;
  Batch batch;
  while (loader.next(batch)) batches.push_back(batch);
  return batches;
}

bool same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!a[k].images.equal(b[k].images) || !a[k].labels.equal(b[k].labels)) return false;
  }
  return true;
}

const torch::Device kCpu(torch::kCPU);

}  // namespace

TEST_CASE("loader batches are the same for 0, 1 and 3 workers, in (step, micro) order") {
  auto dataset = std::make_shared<FakeDataset>(50);
  // G = 12: five steps, the last one short; rank 1's final micro-batches are empty.
  const SamplerOptions options = sampler_options(50, 3, 2, 1, 2, /*drop_last=*/false);
  const ShardedSampler sampler(options);
  std::vector<Batch> reference;
  for (const int64_t workers : {0, 1, 3}) {
    for (const int64_t prefetch : {1, 4}) {
      Loader loader(dataset, sampler, loader_options(workers, prefetch), kCpu);
      std::vector<Batch> batches;
      for (int64_t epoch = 0; epoch < 2; ++epoch) {
        loader.start_epoch(epoch);
        const auto epoch_batches = drain(loader);
        REQUIRE(epoch_batches.size() == 10);
        batches.insert(batches.end(), epoch_batches.begin(), epoch_batches.end());
      }
      if (reference.empty()) {
        reference = batches;
      } else {
        CHECK(same(batches, reference));
      }
    }
  }
  // The reference is what the sampler and the seed rule say.
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    for (int64_t item = 0; item < 10; ++item) {
      const Batch& batch = reference[static_cast<size_t>(epoch * 10 + item)];
      const auto indices = sampler.indices(epoch, item / 2, item % 2);
      const auto n = static_cast<int64_t>(indices.size());
      REQUIRE(batch.images.sizes() == torch::IntArrayRef({n, 2, 2, 2}));
      REQUIRE(batch.images.dtype() == torch::kFloat32);
      REQUIRE(batch.labels.dtype() == torch::kInt64);
      REQUIRE(batch.labels.size(0) == n);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t index = indices[static_cast<size_t>(i)];
        const auto seed = mix_seed(5, static_cast<uint64_t>(epoch), static_cast<uint64_t>(index));
        CHECK(batch.images[i][0][0][0].item<float>() == static_cast<float>(index));
        CHECK(batch.images[i][0][0][1].item<float>() == static_cast<float>(seed % kSeedModulus));
        CHECK(batch.labels[i].item<int64_t>() == index % 10);
      }
    }
  }
  CHECK(reference[8].images.size(0) == 0);  // rank 1, last step: positions 54.. > 50
}

TEST_CASE("start_epoch restarts cleanly mid-epoch and resumes at a step") {
  auto dataset = std::make_shared<FakeDataset>(64);
  const ShardedSampler sampler(sampler_options(64, 4, 2, 0, 1, true));
  Loader full(dataset, sampler, loader_options(0, 1), kCpu);
  full.start_epoch(1);
  const auto expected = drain(full);
  REQUIRE(expected.size() == 16);

  Loader loader(dataset, sampler, loader_options(3, 2), kCpu);
  loader.start_epoch(0);
  Batch batch;
  REQUIRE(loader.next(batch));
  loader.start_epoch(1);  // abandons epoch 0 with workers busy
  for (size_t k = 0; k < 3; ++k) {
    REQUIRE(loader.next(batch));
    CHECK(batch.images.equal(expected[k].images));
  }
  loader.start_epoch(1, /*first_step=*/5);
  const auto tail = drain(loader);
  CHECK(same(tail, std::vector<Batch>(expected.begin() + 10, expected.end())));
  loader.start_epoch(1, sampler.steps_per_epoch());
  CHECK_FALSE(loader.next(batch));
}

TEST_CASE("a worker's exception is rethrown by next() at its batch") {
  for (const int64_t workers : {0, 2}) {
    // Sorted order, batch 4: index 17 is in micro-batch 4.
    auto dataset = std::make_shared<FakeDataset>(40, /*bad_index=*/17);
    const ShardedSampler sampler(sampler_options(40, 4, 1, 0, 1, true, /*shuffle=*/false));
    Loader loader(dataset, sampler, loader_options(workers, 3), kCpu);
    loader.start_epoch(0);
    Batch batch;
    for (int k = 0; k < 4; ++k) REQUIRE(loader.next(batch));
    try {
      loader.next(batch);
      FAIL("the corrupt sample was not reported");
    } catch (const UserError& e) {
      CHECK(std::string(e.what()) == "sample 17: corrupt");
    }
  }
}

TEST_CASE("workers prepare at most `prefetch` batches ahead and stop on destruction") {
  auto dataset = std::make_shared<FakeDataset>(400);
  const ShardedSampler sampler(sampler_options(400, 4, 1, 0, 1, true));
  {
    Loader loader(dataset, sampler, loader_options(3, 2), kCpu);
    loader.start_epoch(0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(dataset->calls <= 2 * 4);
    Batch batch;
    REQUIRE(loader.next(batch));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHECK(dataset->calls <= 3 * 4);
  }
  // Slow samples: the destructor cancels workers in the middle of their batches.
  auto slow = std::make_shared<FakeDataset>(4000, -1, /*sleep_us=*/500);
  const ShardedSampler big(sampler_options(4000, 64, 1, 0, 1, true));
  const auto begin = std::chrono::steady_clock::now();
  {
    Loader loader(slow, big, loader_options(3, 4), kCpu);
    loader.start_epoch(0);
    Batch batch;
    REQUIRE(loader.next(batch));
  }
  {
    Loader never_started(slow, big, loader_options(3, 4), kCpu);
  }
  const auto elapsed = std::chrono::steady_clock::now() - begin;
  CHECK(elapsed < std::chrono::seconds(5));
  CHECK(slow->calls < 4000);
}

TEST_CASE("channels_last batches hold the same values") {
  auto dataset = std::make_shared<FakeDataset>(16);
  const ShardedSampler sampler(sampler_options(16, 4, 1, 0, 1, true));
  LoaderOptions options = loader_options(1, 2);
  Loader plain(dataset, sampler, options, kCpu);
  options.channels_last = true;
  Loader channels_last(dataset, sampler, options, kCpu);
  plain.start_epoch(0);
  channels_last.start_epoch(0);
  Batch a;
  Batch b;
  while (plain.next(a)) {
    REQUIRE(channels_last.next(b));
    CHECK(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
    CHECK(b.images.equal(a.images));
  }
}

TEST_CASE("synthetic data: one device batch, handed out every micro-step") {
  dtrain::data::DataOptions options;
  options.dataset = "synthetic";
  options.synthetic_samples = 10;
  options.synthetic_classes = 3;
  options.synthetic_channels = 3;
  options.synthetic_image_size = 8;
  std::shared_ptr<const Dataset> dataset =
      dtrain::data::open_dataset(options, dtrain::data::Split::kTrain);
  const ShardedSampler sampler(sampler_options(10, 4, 1, 0, 1, /*drop_last=*/false));
  Loader loader(dataset, sampler, loader_options(2, 2), kCpu);
  loader.start_epoch(0);
  const auto batches = drain(loader);
  REQUIRE(batches.size() == 3);
  for (const Batch& batch : batches) {
    CHECK(batch.images.size(1) == 3);
    CHECK(batch.images.size(2) == 8);
    CHECK(batch.images.size(3) == 8);
    CHECK(batch.images.dtype() == torch::kFloat32);
    CHECK(batch.labels.dtype() == torch::kInt64);
    CHECK(batch.labels.min().item<int64_t>() >= 0);
    CHECK(batch.labels.max().item<int64_t>() < 3);
    CHECK(batch.images.data_ptr() == batches[0].images.data_ptr());  // no copies
  }
  CHECK(batches[0].images.size(0) == 4);
  CHECK(batches[2].images.size(0) == 2);
  CHECK(batches[2].labels.size(0) == 2);
}

TEST_CASE("on a CUDA device: the same batches, copied; synthetic made there (skipped on CPU)") {
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device: skipped");
    return;
  }
  const torch::Device cuda(torch::kCUDA, 0);
  auto dataset = std::make_shared<FakeDataset>(50);
  const ShardedSampler sampler(sampler_options(50, 3, 2, 1, 2, /*drop_last=*/false));
  for (const int64_t workers : {0, 2}) {
    LoaderOptions options = loader_options(workers, 2);
    Loader on_host(dataset, sampler, options, kCpu);
    options.channels_last = true;
    Loader on_device(dataset, sampler, options, cuda);
    on_host.start_epoch(3);
    on_device.start_epoch(3);
    Batch a;
    Batch b;
    while (on_host.next(a)) {
      REQUIRE(on_device.next(b));
      CHECK(b.images.device() == cuda);
      CHECK(b.labels.device() == cuda);
      CHECK(b.images.is_contiguous(at::MemoryFormat::ChannelsLast));
      CHECK(b.images.cpu().equal(a.images));
      CHECK(b.labels.cpu().equal(a.labels));
    }
    CHECK_FALSE(on_device.next(b));
  }
  dtrain::data::DataOptions options;
  options.dataset = "synthetic";
  options.synthetic_samples = 100;
  std::shared_ptr<const Dataset> synthetic =
      dtrain::data::open_dataset(options, dtrain::data::Split::kTrain);
  Loader loader(synthetic, ShardedSampler(sampler_options(100, 8, 1, 0, 1, true)),
                loader_options(2, 2), cuda);
  loader.start_epoch(0);
  Batch batch;
  REQUIRE(loader.next(batch));
  CHECK(batch.images.device() == cuda);
  CHECK(batch.images.sizes() == torch::IntArrayRef({8, 3, 224, 224}));
  CHECK(batch.labels.device() == cuda);
}
