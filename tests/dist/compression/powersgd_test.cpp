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

  explicit Batched(const std::vector<std::vector<int64_t>>& groups)
      : codec(options(), world(), Share::kWhole, params()) {
    replan(groups);
  }

  static CompressionOptions options() {
    CompressionOptions options;
    options.kind = "powersgd";
    options.rank = kRank;
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
