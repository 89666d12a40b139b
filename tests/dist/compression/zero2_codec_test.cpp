// The codecs under ZeRO-2, float64 on N ranks.
// Codec by codec, driven as the reducer's hooks drive them (launch, wait, finish) over
// buckets laid out as ZeRO-2 lays them out (133, 67 and 91 elements, which 2, 3 and 4 do not
// divide, padded to a multiple of the ranks; tensors, and a group of three PowerSGD matrices,
// cut by the shard boundaries):
//   - the shard each rank decodes equals the same elements of what the whole-bucket decode
//     (DDP's path) leaves for the same gradients, at every step: 1e-12; the casts within
//     eps x the sum of the ranks' largest magnitudes, since a reduce-scatter adds in another
//     order than an all-reduce and each partial sum is rounded to fp16 or bf16;
//   - error feedback holds per rank over the whole bucket: N x the shard is the sum over ranks
//     of what each sent, g + e_before - e_after, over the shard's parameter elements (1e-12;
//     the padding keeps no residual, and a sign decodes to its chunk's scale there).
// The strategy: ZeRO-2 with fp16/bf16 stays close to one rank and reports the bytes saved;
// warm-up steps are plain ZeRO-2; codec state resumes exactly on the same ranks.
#include "dist/compression/codec.h"
#include "dist/zero/bucket_shards.h"
#include "dist/zero/zero2.h"

#include "codec_test_helpers.h"
#include "equivalence.h"

#include <catch2/catch.hpp>

using namespace dtrain::dist;
using namespace dtrain::dist::compression;
using namespace equivalence;
using namespace codec_test;

namespace {

torch::TensorOptions f64() { return torch::TensorOptions(torch::kFloat64).device(device()); }

// Three buckets: a linear layer and its bias; a conv weight and a matrix too thin to
// compress; three [6, 5] matrices evenly spaced (one PowerSGD group) and a scalar.
std::vector<torch::Tensor> bucket_params() {
  std::vector<torch::Tensor> params;
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{
           {12, 10}, {13}, {5, 3, 2, 2}, {7, 1}, {6, 5}, {6, 5}, {6, 5}, {1}}) {
    params.push_back(torch::zeros(shape, f64()));
  }
  return params;
}

Layout zero2_layout(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  return rank_aligned_plan(packed_layout({{0, 1}, {2, 3}, {4, 5, 6, 7}}, params), numels,
                           world()->size())
      .layout;
}

// A codec with its buckets, each its own flat tensor.
struct Driven {
  std::unique_ptr<Codec> codec;
  std::vector<Bucket> buckets;

  Driven(const CompressionOptions& options, Share share) {
    const std::vector<torch::Tensor> params = bucket_params();
    codec = make_codec(options, world(), params, share);
    const Layout layout = zero2_layout(params);
    for (size_t b = 0; b < layout.size(); ++b) {
      buckets.push_back({layout[b], torch::zeros({layout[b].numel}, f64()),
                         static_cast<int64_t>(b)});
    }
  }

  // Bucket `b` with gradient `grad` at `step`: what this rank keeps of the average.
  torch::Tensor exchange(size_t b, const torch::Tensor& grad, int64_t step) {
    Bucket& bucket = buckets[b];
    bucket.flat.copy_(grad);
    codec->launch(bucket, step)->wait();
    torch::Tensor kept = torch::zeros({codec->kept(bucket).numel}, f64());
    codec->finish(bucket, kept);
    return kept;
  }

  torch::Tensor residual(size_t b) const {
    const std::vector<torch::Tensor> residuals = codec->residuals();
    return b < residuals.size() ? residuals[b].clone()
                                : torch::zeros({buckets[b].layout.numel}, f64());
  }
};

// Elements of the bucket's parameters (the rest is padding).
int64_t used_of(const BucketLayout& bucket, const std::vector<torch::Tensor>& params) {
  int64_t used = 0;
  for (const int64_t param : bucket.params) used += params[param].numel();
  return used;
}

// This rank's gradient of bucket `bucket` at `step`, zero in the padding.
torch::Tensor random_grad(const BucketLayout& bucket, const std::vector<torch::Tensor>& params,
                          int64_t step) {
  auto generator =
      at::detail::createCPUGenerator(1000 * (world()->rank() + 1) + 10 * step + bucket.params[0]);
  torch::Tensor grad = torch::zeros({bucket.numel}, torch::kFloat64);
  const int64_t used = used_of(bucket, params);
  grad.narrow(0, 0, used).copy_(at::randn({used}, generator, torch::kFloat64));
  return grad.to(device());
}

}  // namespace

TEST_CASE("each rank's ZeRO-2 shard is that shard of the whole-bucket decode", "[codec]") {
  const std::string kind = GENERATE("fp16", "bf16", "topk", "powersgd", "onebit");
  INFO("codec " << kind);
  const CompressionOptions options = codec_options(kind);
  Driven whole(options, Share::kWhole), shard(options, Share::kShard);
  const std::vector<torch::Tensor> params = bucket_params();
  const double n = world()->size();
  for (int64_t step = 0; step < 3; ++step) {
    for (size_t b = 0; b < whole.buckets.size(); ++b) {
      INFO("step " << step << ", bucket " << b);
      const torch::Tensor grad = random_grad(whole.buckets[b].layout, params, step);
      const torch::Tensor before = shard.residual(b);
      const torch::Tensor kept = shard.exchange(b, grad, step);
      const torch::Tensor after = shard.residual(b);
      const Range range = shard.codec->kept(shard.buckets[b]);
      const torch::Tensor expected =
          whole.exchange(b, grad, step).narrow(0, range.offset, range.numel);
      if (kind == "fp16" || kind == "bf16") {
        const double eps = kind == "fp16" ? 0x1p-10 : 0x1p-7;
        const double magnitudes = summed(grad.abs().max().reshape({1})).item<double>();
        CHECK(max_abs(kept - expected) <= eps * magnitudes);
        continue;
      }
      CHECK(max_abs(kept - expected) < 1e-12);
      // What this rank sent of its gradient; summed over the ranks, it is N x the average.
      const torch::Tensor sent =
          summed(grad + before - after).narrow(0, range.offset, range.numel);
      const int64_t used = used_of(whole.buckets[b].layout, params);
      const torch::Tensor in_params = torch::arange(range.offset, range.end(), f64()).lt(used);
      CHECK(max_abs((kept * n - sent) * in_params) < 1e-12);
      CHECK(max_abs(after * torch::arange(after.numel(), f64()).ge(used)) == 0.0);
      // The residual is the whole bucket's, as under DDP.
      CHECK(max_abs(after - whole.residual(b)) < 1e-12);
    }
  }
}

namespace {

ZeroOptions stage2() {
  ZeroOptions options;
  options.stage = 2;
  options.bucket_mb = 40.0 * 8 / (1 << 20);  // 40 float64 elements: tensors straddle shards
  return options;
}

struct Trained {
  Net net;
  std::unique_ptr<Zero2Strategy> strategy;  // destroyed first: its hooks point into it
};

Trained start(const CompressionOptions& compression, Net net) {
  auto strategy = std::make_unique<Zero2Strategy>(stage2(), world(), compression);
  strategy->attach(*net, factory(optimizer_options("sgd")));
  return {net, std::move(strategy)};
}

}  // namespace

TEST_CASE("ZeRO-2 with fp16 or bf16 gradients stays close to one rank", "[codec]") {
  CompressionOptions compression;
  compression.kind = GENERATE("fp16", "bf16");
  INFO("codec " << compression.kind);
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, optimizer_options("sgd"));
  Trained run = start(compression, make_net(static_cast<uint64_t>(world()->rank())));
  train(run.net, *run.strategy, data, 0, kSteps, optimizer_options("sgd").lr);
  CHECK(max_difference(*run.net, *reference) < (compression.kind == "fp16" ? 1e-4 : 1e-3));
  // float64 buckets reduce-scattered as 2-byte elements.
  CHECK(stat(run.strategy->stats(), "comm/compression_ratio") == 4.0);
}

TEST_CASE("ZeRO-2's codec warm-up steps are plain ZeRO-2", "[codec]") {
  CompressionOptions compression = codec_options("topk");
  compression.warmup_steps = kSteps;
  const Data data = make_data(world()->size());
  Net reference = train_reference(data, optimizer_options("sgd"));
  Trained run = start(compression, make_net());
  train(run.net, *run.strategy, data, 0, kSteps, optimizer_options("sgd").lr);
  CHECK(max_difference(*run.net, *reference) < kTolerance);
  CHECK(stat(run.strategy->stats(), "comm/compression_ratio") == 1.0);
}

TEST_CASE("ZeRO-2's codec state resumes exactly on the same ranks", "[codec]") {
  const std::string kind = GENERATE("topk", "powersgd", "onebit");
  INFO("codec " << kind);
  CompressionOptions compression = codec_options(kind, 0.5);
  compression.warmup_steps = 1;
  const Data data = make_data(world()->size());
  const double lr = optimizer_options("sgd").lr;
  Trained straight = start(compression, make_net());
  train(straight.net, *straight.strategy, data, 0, kSteps, lr);

  Trained first = start(compression, make_net());
  train(first.net, *first.strategy, data, 0, kSteps / 2, lr);
  CHECK(stat(first.strategy->stats(), "comm/residual_norm") > 0);
  const std::string dir = fresh_directory("zero2_codec_resume_" + kind);
  save_checkpoint(*first.strategy, dir);
  Trained resumed = start(compression, copy_of(first.net));
  resumed.strategy->load(dir);
  train(resumed.net, *resumed.strategy, data, kSteps / 2, kSteps, lr);
  CHECK(max_difference(*resumed.net, *straight.net) < kTolerance);
}
