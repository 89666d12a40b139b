// PowerSGD's batched codec (matrices grouped by shape, one Gram-Schmidt per bucket) against a
// straightforward reference on N ranks, float64: one matrix at a time, its own all-reduces
// and a Householder QR (torch::linalg_qr), as the codec did before it was batched. Over
// several steps with error feedback, both must leave the same averaged gradient, the same
// residual and the same warm-start Q (up to each column's sign, which a Householder QR and
// Gram-Schmidt choose differently and which cancels in P Q^T), also across a re-plan of the
// buckets and a checkpoint of the codec's state, with a zero gradient among the matrices.
#include "dist/compression/gram_schmidt.h"
#include "dist/compression/powersgd.h"

#include "codec_test_helpers.h"
#include "equivalence.h"

#include <catch2/catch.hpp>

#include <cmath>
#include <map>

using namespace dtrain::dist;
using namespace dtrain::dist::compression;
using equivalence::device;
using equivalence::world;
using codec_test::averaged;
using codec_test::max_abs;

namespace {

constexpr int64_t kRank = 3;
constexpr double kTolerance = 1e-11;

// Two same-shape linear weights, a conv weight and a matrix that starts with zero gradients
// (compressed at rank 3), with a bias and a matrix too thin to gain between them.
const std::vector<std::vector<int64_t>> kShapes = {{12, 10}, {12},   {12, 10}, {3, 2},
                                                   {5, 3, 2, 2}, {8, 6}, {7}};
const std::vector<bool> kCompressed = {true, false, true, false, true, true, false};

torch::TensorOptions f64() { return torch::TensorOptions(torch::kFloat64).device(device()); }

// This rank's gradients of step `step`; the matrix [8, 6] has none in the first two steps.
std::vector<torch::Tensor> gradients(int64_t step) {
  auto generator = at::detail::createCPUGenerator(1000 * (world()->rank() + 1) + step);
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < kShapes.size(); ++i) {
    torch::Tensor grad = at::randn(kShapes[i], generator, torch::kFloat64).to(device());
    if (i == 5 && step < 2) grad.zero_();
    grads.push_back(grad);
  }
  return grads;
}

// PowerSGD one matrix at a time.
struct Reference {
  std::map<size_t, torch::Tensor> q, residual;  // by parameter, [cols, rank] and [rows, cols]

  std::vector<torch::Tensor> step(const std::vector<torch::Tensor>& grads) {
    std::vector<torch::Tensor> result;
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!kCompressed[i]) {
        result.push_back(averaged(grads[i].clone()));
        continue;
      }
      const int64_t rows = grads[i].size(0), cols = grads[i].numel() / rows;
      torch::Tensor m = grads[i].reshape({rows, cols});
      if (residual.count(i)) m = m + residual[i];
      if (!q.count(i)) {
        auto generator = at::detail::createCPUGenerator(static_cast<uint64_t>(i) + 1);
        q[i] = at::randn({cols, kRank}, generator, torch::kFloat64).to(device());
      }
      const torch::Tensor p = std::get<0>(at::linalg_qr(averaged(m.mm(q[i]))));
      const torch::Tensor own_q = m.t().mm(p);
      residual[i] = m - p.mm(own_q.t());
      q[i] = averaged(own_q.clone());
      result.push_back(p.mm(q[i].t()).view(grads[i].sizes()));
    }
    return result;
  }
};

// The codec over buckets of `groups` (parameter indices), packed in that order.
struct Batched {
  PowerSgdCodec codec;
  std::vector<Bucket> buckets;

  explicit Batched(const std::vector<std::vector<int64_t>>& groups,
                   const CompressionOptions& settings = options(true))
      : codec(settings, world(), Share::kWhole, params()) {
    replan(groups);
  }

  static CompressionOptions options(bool error_feedback = true) {
    CompressionOptions options;
    options.kind = "powersgd";
    options.rank = kRank;
    options.error_feedback = error_feedback;
    return options;
  }
  static std::vector<torch::Tensor> params() {
    std::vector<torch::Tensor> params;
    for (const std::vector<int64_t>& shape : kShapes) params.push_back(torch::zeros(shape, f64()));
    return params;
  }

  void replan(const std::vector<std::vector<int64_t>>& groups) {
    buckets.clear();
    for (const std::vector<int64_t>& group : groups) {
      Bucket bucket;
      bucket.index = static_cast<int64_t>(buckets.size());
      for (const int64_t param : group) {
        bucket.layout.params.push_back(param);
        bucket.layout.offsets.push_back(bucket.layout.numel);
        bucket.layout.numel += torch::zeros(kShapes[param]).numel();
      }
      bucket.flat = torch::zeros({bucket.layout.numel}, f64());
      buckets.push_back(bucket);
    }
    codec.relayout(buckets);
  }

  // As the reducer runs it: every bucket launched, then each waited for and finished.
  std::vector<torch::Tensor> step(const std::vector<torch::Tensor>& grads) {
    std::vector<std::unique_ptr<Work>> works;
    for (Bucket& bucket : buckets) {
      for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
        const torch::Tensor& grad = grads[bucket.layout.params[i]];
        bucket.flat.narrow(0, bucket.layout.offsets[i], grad.numel()).copy_(grad.reshape(-1));
      }
      works.push_back(codec.launch(bucket, 0));
    }
    std::vector<torch::Tensor> result(grads.size());
    for (size_t b = 0; b < buckets.size(); ++b) {
      works[b]->wait();
      codec.finish(buckets[b], buckets[b].flat);
      const BucketLayout& layout = buckets[b].layout;
      for (size_t i = 0; i < layout.params.size(); ++i) {
        const torch::Tensor& grad = grads[layout.params[i]];
        result[layout.params[i]] =
            buckets[b].flat.narrow(0, layout.offsets[i], grad.numel()).view(grad.sizes()).clone();
      }
    }
    return result;
  }
};

// Q and reference Q alike but for the sign of each column.
double q_difference(const torch::Tensor& q, const torch::Tensor& reference) {
  const torch::Tensor signs = (q * reference).sum(0).sign();
  return max_abs(q * signs - reference);
}

void check_same(Batched& batched, Reference& reference, const std::vector<torch::Tensor>& result,
                const std::vector<torch::Tensor>& expected) {
  const CodecState state = batched.codec.state();
  for (size_t i = 0; i < kShapes.size(); ++i) {
    INFO("parameter " << i);
    CHECK(max_abs(result[i] - expected[i]) < kTolerance);
    const auto param = static_cast<int64_t>(i);
    if (!kCompressed[i]) {
      CHECK(max_abs(state.slots[0].at(param)) == 0.0);  // sent exactly: no residual
      continue;
    }
    CHECK(max_abs(state.slots[0].at(param).view_as(reference.residual[i]) -
                  reference.residual[i]) < kTolerance);
    CHECK(q_difference(state.shared.at(param), reference.q[i]) < kTolerance);
    // Every rank holds the same Q.
    const torch::Tensor q = state.shared.at(param);
    CHECK(max_abs(averaged(q.clone()) - q) < 1e-15);
  }
}

}  // namespace

TEST_CASE("batched PowerSGD equals PowerSGD one matrix at a time", "[powersgd]") {
  Reference reference;
  Batched batched({{0, 1, 2, 3}, {4, 5, 6}});
  for (int64_t step = 0; step < 6; ++step) {
    INFO("step " << step);
    if (step == 3) batched.replan({{6, 5, 2}, {4, 3, 1, 0}});  // the Qs follow their parameters
    if (step == 4) {
      // A checkpoint's state, loaded into a fresh codec on the same buckets.
      Batched resumed({{6, 5, 2}, {4, 3, 1, 0}});
      resumed.codec.set_state(batched.codec.state());
      const std::vector<torch::Tensor> grads = gradients(step);
      const std::vector<torch::Tensor> expected = reference.step(grads);
      check_same(resumed, reference, resumed.step(grads), expected);
      batched.codec.set_state(resumed.codec.state());
      continue;
    }
    const std::vector<torch::Tensor> grads = gradients(step);
    const std::vector<torch::Tensor> expected = reference.step(grads);
    check_same(batched, reference, batched.step(grads), expected);
  }
}

TEST_CASE("PowerSGD keeps no state for a bucket of tensors it sends as they are", "[powersgd]") {
  // A bias, a matrix rank 3 would not shrink and a bias: all-reduced as the bucket is.
  for (const bool error_feedback : {true, false}) {
    Batched exact({{1, 3, 6}}, Batched::options(error_feedback));
    for (int64_t step = 0; step < 2; ++step) {
      const std::vector<torch::Tensor> grads = gradients(step);
      const std::vector<torch::Tensor> result = exact.step(grads);
      for (const int64_t i : {1, 3, 6}) {
        CHECK(max_abs(result[i] - averaged(grads[i].clone())) < 1e-15);
      }
    }
    CHECK(exact.codec.state_bytes() == 0);
    CHECK(exact.codec.payload_bytes(exact.buckets[0]) ==
          static_cast<int64_t>(exact.buckets[0].flat.nbytes()));
    const CodecState state = exact.codec.state();
    CHECK(state.shared.empty());
    for (const ByParam& slot : state.slots) CHECK(slot.empty());
    // Beside a bucket it compresses, the exact one adds nothing.
    Batched alone({{0, 2, 4, 5}}, Batched::options(error_feedback));
    Batched both({{0, 2, 4, 5}, {1, 3, 6}}, Batched::options(error_feedback));
    alone.step(gradients(0));
    both.step(gradients(0));
    CHECK(both.codec.state_bytes() == alone.codec.state_bytes());
  }
}

TEST_CASE("A PowerSGD step with a non-finite gradient leaves the warm-start Qs as they were",
          "[powersgd]") {
  // Without error feedback (train.nonfinite = "skip" refuses it with), as a skipped step:
  // the NaN step's result is not used, and the steps after it equal those of a codec that
  // never saw it.
  // One bucket: a NaN loss spoils every gradient, and each bucket checks its own Qs.
  Batched poisoned({{0, 1, 2, 3, 4, 5, 6}}, Batched::options(false));
  Batched clean({{0, 1, 2, 3, 4, 5, 6}}, Batched::options(false));
  poisoned.step(gradients(0));
  clean.step(gradients(0));
  const CodecState before = poisoned.codec.state();
  std::vector<torch::Tensor> bad = gradients(1);
  if (world()->rank() == world()->size() - 1) bad[0][0][0] = std::nan("");  // one rank's NaN
  const std::vector<torch::Tensor> skipped = poisoned.step(bad);
  CHECK_FALSE(torch::isfinite(skipped[0]).all().item<bool>());
  const CodecState after = poisoned.codec.state();
  REQUIRE(after.shared.size() == before.shared.size());
  for (const auto& [param, q] : before.shared) {
    INFO("parameter " << param);
    CHECK(torch::equal(after.shared.at(param), q));
  }
  for (int64_t step = 2; step < 4; ++step) {
    const std::vector<torch::Tensor> grads = gradients(step);
    const std::vector<torch::Tensor> expected = clean.step(grads);
    const std::vector<torch::Tensor> result = poisoned.step(grads);
    for (size_t i = 0; i < kShapes.size(); ++i) {
      INFO("step " << step << ", parameter " << i);
      CHECK(torch::equal(result[i], expected[i]));
    }
  }
}

TEST_CASE("PowerSGD knows when a rank compresses nothing", "[powersgd]") {
  CHECK(compressed_at({12, 10}, 3));
  CHECK_FALSE(compressed_at({12}, 3));
  CHECK_FALSE(compressed_at({3, 2}, 3));
  CHECK_FALSE(compressed_at({12, 10}, 6));  // (12 + 10) 6 >= 120
  CHECK(any_compressed(kShapes, kRank));
  CHECK_FALSE(any_compressed(kShapes, 1024));
}

TEST_CASE("Gram-Schmidt spans what a Householder QR spans, zero columns included",
          "[powersgd]") {
  auto generator = at::detail::createCPUGenerator(5);
  torch::Tensor batch = at::randn({4, 9, 3}, generator, torch::kFloat64).to(device());
  batch[1].zero_();                  // all zero: e_1, e_2, e_3, as LAPACK leaves it
  batch[2].select(1, 2).zero_();     // a zero last column: e_3, made orthogonal
  const torch::Tensor original = batch.clone();
  torch::Tensor rows = batch.transpose(1, 2).contiguous();
  orthonormalize_rows_(rows);
  batch = rows.transpose(1, 2);
  const torch::Tensor eye = torch::eye(3, f64());
  for (int64_t b = 0; b < 4; ++b) {
    INFO("matrix " << b);
    CHECK(max_abs(batch[b].t().mm(batch[b]) - eye) < 1e-14);
    if (b == 1) {
      CHECK(max_abs(batch[b] - torch::eye(9, 3, f64())) == 0.0);
      continue;
    }
    // The same first columns as Householder's, but for signs; with a zero column only the
    // others are fixed by the input.
    const torch::Tensor householder = std::get<0>(at::linalg_qr(original[b]));
    const int64_t fixed = b == 2 ? 2 : 3;
    CHECK(q_difference(batch[b].narrow(1, 0, fixed), householder.narrow(1, 0, fixed)) < 1e-13);
  }
}
