// PowerSGD's encode + decode on ResNet-50's parameters (161 tensors, 53 compressed matrices),
// in DDP's buckets (25 MB, the first 1 MB, in backward's order): the codec as built
// (dist/compression/powersgd.h, one step = every bucket launched, waited for and finished)
// beside a per-matrix run of the same algorithm written as the codec was before it was
// batched (a product, a Householder QR and a copy per matrix and per tensor), with the ratio.
// Then the orthogonalisation alone, on the 53 Ps: a QR per matrix, one batched QR of the
// zero-padded Ps, and the batched Gram-Schmidt the codec uses.
//   usage: scripts/mpirun.sh -np 1 build/bench_powersgd [cpu|cuda] [steps] [rank]
//          (defaults: cuda when available, 20 steps, rank 4; float32 gradients)
// Each figure is the best of three rounds, the two sides alternated. One rank, so the
// all-reduces cost next to nothing and the time is the codec's own. "ops" is the number of
// ATen operators called per step from outside other operators (each a kernel launch or more
// on a GPU; views and allocations left out), counted with a RecordFunction callback.
#include "dist/buckets.h"
#include "dist/comm/communicator.h"
#include "dist/compression/codec.h"
#include "dist/compression/gram_schmidt.h"
#include "dist/compression/powersgd_plan.h"
#include "models/registry.h"

#include <ATen/record_function.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <set>
#include <string>

namespace {

using namespace dtrain::dist;
using Clock = std::chrono::steady_clock;

std::atomic<int64_t> top_level_ops{0};
thread_local int depth = 0;

// Operators that only make a view or an allocation: no kernel.
bool launches_nothing(const char* name) {
  static const std::set<std::string> names = {
      "aten::view",      "aten::narrow",     "aten::slice",    "aten::as_strided",
      "aten::transpose", "aten::t",          "aten::select",   "aten::diagonal",
      "aten::unsqueeze", "aten::squeeze",    "aten::expand",   "aten::reshape",
      "aten::alias",     "aten::view_as",    "aten::permute",  "aten::detach",
      "aten::empty",     "aten::empty_like", "aten::resize_",  "aten::empty_strided"};
  return names.count(name) > 0;
}

void count_ops() {
  at::addGlobalCallback(
      at::RecordFunctionCallback(
          [](const at::RecordFunction& fn) -> std::unique_ptr<at::ObserverContext> {
            if (depth++ == 0 && !launches_nothing(fn.name())) ++top_level_ops;
            return nullptr;
          },
          [](const at::RecordFunction&, at::ObserverContext*) { --depth; })
          .scopes({at::RecordScope::FUNCTION}));
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

struct Timing {
  double ms;
  int64_t ops;
};

// Mean time and operators of `fn` over `steps` calls after two untimed ones; `before` runs
// untimed ahead of each.
template <typename Before, typename Fn>
Timing measure(const torch::Device& device, int steps, Before&& before, Fn&& fn) {
  for (int i = 0; i < 2; ++i) {
    before();
    fn();
  }
  double ms = 0.0;
  int64_t ops = 0;
  for (int i = 0; i < steps; ++i) {
    before();
    synchronize(device);
    const int64_t ops_before = top_level_ops;
    const auto start = Clock::now();
    fn();
    synchronize(device);
    ms += std::chrono::duration<double, std::milli>(Clock::now() - start).count();
    ops += top_level_ops - ops_before;
  }
  return {ms / steps, ops / steps};
}

// The codec as it was before batching: per matrix a product, a QR, two products and a
// residual, and a copy per tensor into and out of the payloads (error feedback on).
class PerMatrix {
 public:
  PerMatrix(std::shared_ptr<Communicator> comm, const std::vector<torch::Tensor>& params,
            int64_t rank)
      : comm_(std::move(comm)), params_(params), rank_(rank) {}

  void step(std::vector<Bucket>& buckets) {
    residuals_.resize(buckets.size());
    for (Bucket& bucket : buckets) {
      torch::Tensor& residual = residuals_[bucket.index];
      if (!residual.defined()) residual = torch::zeros_like(bucket.flat);
      bucket.flat.add_(residual);
      std::vector<Item> exact, matrices;
      for (size_t i = 0; i < bucket.layout.params.size(); ++i) {
        const torch::Tensor& param = params_[bucket.layout.params[i]];
        const int64_t rows = param.dim() < 2 ? 1 : param.size(0);
        const int64_t cols = param.numel() / rows;
        const int64_t r = std::min({rank_, rows, cols});
        Item item{bucket.layout.params[i], bucket.layout.offsets[i], rows, cols, r};
        (param.dim() >= 2 && (rows + cols) * r < rows * cols ? matrices : exact).push_back(item);
      }
      int64_t first_numel = 0, second_numel = 0;
      for (const Item& item : exact) first_numel += item.rows * item.cols;
      for (const Item& item : matrices) {
        first_numel += item.rows * item.rank;
        second_numel += item.cols * item.rank;
      }
      torch::Tensor first = torch::empty({first_numel}, bucket.flat.options());
      torch::Tensor second = torch::empty({second_numel}, bucket.flat.options());
      int64_t at = 0;
      for (const Item& item : exact) {
        first.narrow(0, at, item.rows * item.cols).copy_(m_of(bucket.flat, item).view(-1));
        at += item.rows * item.cols;
      }
      std::vector<torch::Tensor> ps, qs;
      for (const Item& item : matrices) {
        ps.push_back(first.narrow(0, at, item.rows * item.rank).view({item.rows, item.rank}));
        torch::mm_out(ps.back(), m_of(bucket.flat, item), q_of(item, bucket.flat));
        at += item.rows * item.rank;
      }
      comm_->all_reduce(first, ReduceOp::kAverage)->wait();
      at = 0;
      for (size_t k = 0; k < matrices.size(); ++k) {
        const Item& item = matrices[k];
        ps[k].copy_(std::get<0>(at::linalg_qr(ps[k])));
        const torch::Tensor m = m_of(bucket.flat, item);
        qs.push_back(second.narrow(0, at, item.cols * item.rank).view({item.cols, item.rank}));
        torch::mm_out(qs[k], m.t(), ps[k]);
        torch::Tensor r = m_of(residual, item);
        torch::sub_out(r, m, torch::mm(ps[k], qs[k].t()));
        at += item.cols * item.rank;
      }
      comm_->all_reduce(second, ReduceOp::kAverage)->wait();
      at = 0;
      for (const Item& item : exact) {
        m_of(bucket.flat, item).view(-1).copy_(first.narrow(0, at, item.rows * item.cols));
        at += item.rows * item.cols;
      }
      for (size_t k = 0; k < matrices.size(); ++k) {
        torch::Tensor m = m_of(bucket.flat, matrices[k]);
        torch::mm_out(m, ps[k], qs[k].t());
        q_[matrices[k].param].copy_(qs[k]);
      }
    }
  }

 private:
  struct Item {
    int64_t param, offset, rows, cols, rank;
  };
  static torch::Tensor m_of(const torch::Tensor& flat, const Item& item) {
    return flat.narrow(0, item.offset, item.rows * item.cols).view({item.rows, item.cols});
  }
  torch::Tensor& q_of(const Item& item, const torch::Tensor& like) {
    torch::Tensor& q = q_[item.param];
    if (!q.defined()) q = torch::randn({item.cols, item.rank}, like.options());
    return q;
  }

  std::shared_ptr<Communicator> comm_;
  std::vector<torch::Tensor> params_;
  int64_t rank_;
  std::map<int64_t, torch::Tensor> q_;
  std::vector<torch::Tensor> residuals_;
};

std::vector<Bucket> make_buckets(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> order(params.size());
  for (size_t i = 0; i < params.size(); ++i) order[i] = static_cast<int64_t>(params.size() - 1 - i);
  const Layout layout = packed_layout(plan_buckets(order, params, 1 << 20, 25 << 20), params);
  std::vector<Bucket> buckets;
  for (const BucketLayout& bucket_layout : layout) {
    buckets.push_back({bucket_layout, torch::empty({bucket_layout.numel}, params[0].options()),
                       static_cast<int64_t>(buckets.size())});
  }
  return buckets;
}

void print(const std::string& name, const Timing& timing, const Timing& reference) {
  fmt::print("{:<34} {:9.2f} ms {:7} ops   {:6.2f}x faster, {:6.1f}x fewer ops\n", name,
             timing.ms, timing.ops, reference.ms / timing.ms,
             static_cast<double>(reference.ops) / static_cast<double>(timing.ops));
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 ? std::string(argv[1]) == "cuda" : torch::cuda::is_available();
  const torch::Device device(cuda ? torch::kCUDA : torch::kCPU);
  const int steps = argc > 2 ? std::stoi(argv[2]) : 20;
  const int64_t rank = argc > 3 ? std::stoll(argv[3]) : 4;
  std::shared_ptr<Communicator> comm = make_world_communicator(device, 60.0);

  torch::manual_seed(0);
  dtrain::models::ModelOptions model_options;
  model_options.name = "resnet50";
  auto model = dtrain::models::make_model(model_options, {3, 224, 224}, 1000);
  std::vector<torch::Tensor> params;
  for (const torch::Tensor& param : model->parameters()) {
    params.push_back(param.detach().to(device));
  }
  std::vector<Bucket> buckets = make_buckets(params);
  std::vector<torch::Tensor> gradients;
  for (const Bucket& bucket : buckets) gradients.push_back(torch::randn_like(bucket.flat));
  auto restore = [&]() {
    for (size_t b = 0; b < buckets.size(); ++b) buckets[b].flat.copy_(gradients[b]);
  };
  std::vector<std::vector<int64_t>> shapes;
  for (const torch::Tensor& param : params) shapes.push_back(param.sizes().vec());
  int64_t matrices = 0, groups = 0;
  for (const Bucket& bucket : buckets) {
    const compression::PowerSgdPlan plan =
        compression::plan_powersgd(bucket.layout, shapes, rank, device,
                                   {0, bucket.layout.numel});
    matrices += plan.num_matrices;
    groups += static_cast<int64_t>(plan.groups.size());
  }
  fmt::print("ResNet-50: {} tensors in {} buckets, {} matrices compressed in {} groups, {}, "
             "rank {}, {} steps\n", params.size(), buckets.size(), matrices, groups,
             device.str(), rank, steps);
  count_ops();

  PerMatrix per_matrix(comm, params, rank);
  CompressionOptions options;
  options.kind = "powersgd";
  options.rank = rank;
  std::unique_ptr<compression::Codec> codec = compression::make_codec(options, comm, params);
  auto codec_step = [&]() {
    std::vector<std::unique_ptr<Work>> works;
    for (Bucket& bucket : buckets) works.push_back(codec->launch(bucket, 0));
    for (size_t b = 0; b < buckets.size(); ++b) {
      works[b]->wait();
      codec->finish(buckets[b], buckets[b].flat);
    }
  };
  // The best of three rounds, the two alternated (the machine may be busy with other work).
  Timing reference{1e30, 0}, batched{1e30, 0};
  for (int round = 0; round < 3; ++round) {
    const Timing a = measure(device, steps, restore, [&]() { per_matrix.step(buckets); });
    const Timing b = measure(device, steps, restore, codec_step);
    if (a.ms < reference.ms) reference = a;
    if (b.ms < batched.ms) batched = b;
  }
  fmt::print("encode + decode, one step:\n");
  print("per matrix (before batching)", reference, reference);
  print("codec as built", batched, reference);

  // The 53 Ps (rows x rank), one by one and zero-padded into one batch.
  std::vector<torch::Tensor> ps;
  int64_t max_rows = 0;
  for (const torch::Tensor& param : params) {
    if (param.dim() < 2) continue;
    const int64_t rows = param.size(0), cols = param.numel() / rows;
    if ((rows + cols) * rank >= rows * cols) continue;
    ps.push_back(torch::randn({rows, rank}, param.options()));
    max_rows = std::max(max_rows, rows);
  }
  torch::Tensor padded = torch::zeros({static_cast<int64_t>(ps.size()), max_rows, rank},
                                      params[0].options());
  for (size_t i = 0; i < ps.size(); ++i) padded[i].narrow(0, 0, ps[i].size(0)).copy_(ps[i]);
  torch::Tensor work = padded.clone();
  auto fresh = [&]() { work.copy_(padded); };
  const Timing qr_each = measure(device, steps, fresh, [&]() {
    for (const torch::Tensor& p : ps) p.copy_(std::get<0>(at::linalg_qr(p)));
  });
  const Timing qr_batched = measure(device, steps, fresh, [&]() {
    work.copy_(std::get<0>(at::linalg_qr(work)));
  });
  torch::Tensor rows = padded.transpose(1, 2).contiguous();  // as the codec keeps them: P^T
  torch::Tensor work_rows = rows.clone();
  const Timing gram_schmidt = measure(device, steps, [&]() { work_rows.copy_(rows); },
                                      [&]() { compression::orthonormalize_rows_(work_rows); });
  fmt::print("orthogonalisation of the {} Ps:\n", ps.size());
  print("QR per matrix (torch::linalg_qr)", qr_each, qr_each);
  print("one batched QR (padded)", qr_batched, qr_each);
  print("batched Gram-Schmidt (padded)", gram_schmidt, qr_each);
  return 0;
}
