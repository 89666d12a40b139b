#include "dist/memory_model.h"

#include "common/bytes.h"
#include "common/error.h"
#include "dist/buckets.h"
#include "dist/compression/powersgd_plan.h"
#include "dist/compression/share.h"
#include "dist/compression/topk.h"
#include "dist/factory.h"
#include "dist/ps/plan.h"
#include "dist/reducer.h"
#include "dist/zero/bucket_shards.h"
#include "dist/zero/partition.h"

#include <fmt/format.h>
#include <unistd.h>
#ifdef DTRAIN_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <numeric>

namespace dtrain::dist {

namespace {

// Stage 2's gradient buffers (zero2.cpp's kGradientBuffers): one bucket fills while the one
// before it is on the wire.
constexpr int64_t kZero2GradientBuffers = 2;

std::vector<int64_t> param_numels(const std::vector<torch::Tensor>& params) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  return numels;
}

int64_t bytes_of(const std::vector<torch::Tensor>& params) {
  int64_t bytes = 0;
  for (const torch::Tensor& param : params) {
    bytes += param.numel() * static_cast<int64_t>(param.element_size());
  }
  return bytes;
}

// single and ddp: every rank the whole model, its gradients (autograd's, or ddp's buckets of
// whole tensors back to back: the same bytes) and the whole optimizer state.
MemoryPrediction replicated(const std::string& name, const ModelStateInput& input,
                            int world_size) {
  const int64_t model = bytes_of(input.params);
  const ModelStateBytes each{model, model, input.state_tensors * model};
  return {name, std::vector<ModelStateBytes>(world_size, each), "", true};
}

// zero.h: flat parameters and one flat gradient bucket of N x the largest share, this rank's
// shard of averaged gradients, and the state of the whole tensors it owns.
MemoryPrediction zero1(const ModelStateInput& input, int world_size) {
  const std::vector<int64_t> numels = param_numels(input.params);
  const ZeroPartition partition = partition_parameters(numels, world_size);
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  const int64_t flat = partition.shard_numel * world_size * element_size;
  MemoryPrediction prediction{"zero stage 1", {}, "", true};
  for (int r = 0; r < world_size; ++r) {
    const int64_t owned = std::accumulate(numels.begin() + partition.first[r],
                                          numels.begin() + partition.first[r + 1], int64_t{0});
    prediction.ranks.push_back({flat, flat + partition.shard_numel * element_size,
                                input.state_tensors * owned * element_size});
  }
  return prediction;
}

// The parameters in reversed registration order: the order in which ddp and ZeRO-2 plan
// their first buckets, backward's first guess.
std::vector<int64_t> reversed_order(const ModelStateInput& input) {
  std::vector<int64_t> order(input.params.size());
  std::iota(order.rbegin(), order.rend(), 0);
  return order;
}

// ZeRO-2's buckets (zero2.cpp): bucket_mb each, padded to a multiple of the ranks.
PsPlan zero2_plan(const ZeroOptions& options, const ModelStateInput& input, int world_size) {
  const auto cap = static_cast<int64_t>(options.bucket_mb * kMiB);
  return rank_aligned_plan(
      packed_layout(plan_buckets(reversed_order(input), input.params, cap, cap), input.params),
      param_numels(input.params), world_size);
}

// zero2.h: every bucket padded to a multiple of N, the optimizer's copy of this rank's shard,
// its shard of the gradients, the two shared bucket buffers, and the state of its pieces (the
// padding has none).
MemoryPrediction zero2(const ZeroOptions& options, const ModelStateInput& input,
                       int world_size) {
  const PsPlan plan = zero2_plan(options, input, world_size);
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  int64_t padded = 0, largest = 0;
  for (const BucketLayout& bucket : plan.layout) {
    padded += bucket.numel;
    largest = std::max(largest, bucket.numel);
  }
  const int64_t buffers =
      std::min<int64_t>(kZero2GradientBuffers, static_cast<int64_t>(plan.layout.size()));
  const std::vector<int64_t> shard = plan.server_numel();
  std::vector<int64_t> stepped(world_size, 0);
  for (const PsPiece& piece : plan.pieces) stepped[plan.chunks[piece.chunk].server] += piece.numel;
  MemoryPrediction prediction{"zero stage 2", {}, "", true};
  for (int r = 0; r < world_size; ++r) {
    prediction.ranks.push_back({(padded + shard[r]) * element_size,
                                (shard[r] + buffers * largest) * element_size,
                                input.state_tensors * stepped[r] * element_size});
  }
  return prediction;
}

// ps.h: workers hold the model and its gradient buckets (whole tensors back to back); servers
// their chunks' parameters, gradients and optimizer state. A colocated rank is both.
MemoryPrediction parameter_server(const PsOptions& options, const ModelStateInput& input, int world_size) {
  const bool dedicated = options.placement == "dedicated";
  MemoryPrediction prediction{fmt::format("ps ({})", options.placement), {}, "", false};
  const int servers = dedicated ? static_cast<int>(options.servers) : world_size;
  const int workers = dedicated ? world_size - servers : world_size;
  if (workers < 1) {
    prediction.problem = fmt::format("dist.ps.servers = {} dedicated servers leave no worker "
                                     "among {} rank(s)",
                                     servers, world_size);
    return prediction;
  }
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  prediction.problem =
      ps_chunking_problem(param_numels(input.params), element_size, options.chunk_mb);
  if (!prediction.problem.empty()) return prediction;
  // Async servers keep tensors whole (ps.cpp); the collective transport serves bsp and ssp
  // only, where the plan is the same.
  const PsPlan plan = make_ps_plan(input.params, servers, options.chunk_mb,
                                   options.consistency == "async");
  const std::vector<int64_t> served = plan.server_numel();
  const int64_t model = bytes_of(input.params);
  // Beside GPU workers, the message transport's servers keep their chunks in host memory
  // (a dedicated server runs on the CPU); the collective and p2p transports', on their
  // worker's GPU.
  const bool chunks_on_host =
      !options.use_collectives(/*on_gpus=*/true) && !ps_uses_p2p(options, /*on_gpus=*/true);
  for (int r = 0; r < world_size; ++r) {
    ModelStateBytes bytes;
    if (r < workers) bytes = {model, model, 0};
    if (!dedicated) bytes.ssp_slots = ps_slot_bytes(options, plan, r, element_size, input.on_gpus);
    const int server = dedicated ? r - workers : r;
    if (server >= 0) {
      const int64_t chunks = served[server] * element_size;
      bytes.parameters += chunks;
      bytes.gradients += chunks;
      bytes.optimizer_state += input.state_tensors * chunks;
      if (chunks_on_host) bytes.host = (2 + input.state_tensors) * chunks;
    }
    prediction.ranks.push_back(bytes);
  }
  return prediction;
}

// zero3.h: units for buckets, each padded to a multiple of the ranks; between steps a rank
// holds its shard of the parameters and of the gradients, and its pieces' optimizer state.
MemoryPrediction zero3(const ModelStateInput& input, int world_size) {
  MemoryPrediction prediction{"zero stage 3", {}, "", true};
  if (input.units.empty()) {
    prediction.problem = "the model is not made of units (dtrain::UnitModule)";
    return prediction;
  }
  const PsPlan plan = rank_aligned_plan(packed_layout(input.units, input.params),
                                        param_numels(input.params), world_size);
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  const std::vector<int64_t> shard = plan.server_numel();
  std::vector<int64_t> stepped(world_size, 0);
  for (const PsPiece& piece : plan.pieces) stepped[plan.chunks[piece.chunk].server] += piece.numel;
  for (int r = 0; r < world_size; ++r) {
    prediction.ranks.push_back({shard[r] * element_size, shard[r] * element_size,
                                input.state_tensors * stepped[r] * element_size});
  }
  return prediction;
}

// The codec's state on `rank` of `world_size` for buckets laid out as `layout`, each rank
// keeping `share` of every bucket (codec.h's state_bytes(), ps/push_codec.h's).
int64_t codec_state_bytes(const CompressionOptions& options, const Layout& layout,
                          const ModelStateInput& input, compression::Share share, int rank,
                          int world_size) {
  const size_t slots = options.kind == "topk" ? compression::topk_slots(options).size()
                       : options.has_residuals() ? 1
                                                 : 0;
  const int64_t element_size = static_cast<int64_t>(input.params.front().element_size());
  int64_t bytes = 0;
  if (options.kind != "powersgd") {
    for (const BucketLayout& bucket : layout) {
      bytes += static_cast<int64_t>(slots) * bucket.numel * element_size;
    }
    return bytes;
  }
  // PowerSGD's Entry per bucket that it compresses (one of exact tensors alone keeps
  // nothing): the residual, both payloads (the Qs kept as the next warm start), the Qs before
  // the step's, the padded batch of Ps, and the plan's index tensors.
  std::vector<std::vector<int64_t>> shapes;
  for (const torch::Tensor& param : input.params) shapes.push_back(param.sizes().vec());
  for (const BucketLayout& bucket : layout) {
    const compression::PowerSgdPlan plan = compression::plan_powersgd(
        bucket, shapes, options.rank, torch::kCPU,
        compression::kept_range(share, bucket.numel, rank, world_size));
    if (plan.groups.empty()) continue;
    bytes += static_cast<int64_t>(slots) * bucket.numel * element_size;
    bytes += (plan.exact_numel + plan.p_numel + 2 * plan.q_numel +
              plan.num_matrices * plan.max_rank * plan.max_rows) * element_size;
    for (const torch::Tensor& index :
         {plan.exact_chunks, plan.kept_exact_chunks, plan.padded_index}) {
      bytes += index.defined() ? static_cast<int64_t>(index.nbytes()) : 0;
    }
  }
  return bytes;
}

// Adds the codec's state to the ranks that run it: every rank under ddp and ZeRO-2, the
// workers under the parameter server. The other strategies refuse dist.compression.
void add_codec_state(const DistOptions& options, const ModelStateInput& input,
                     MemoryPrediction& prediction) {
  if (!options.compression.enabled() || prediction.ranks.empty()) return;
  const int world_size = static_cast<int>(prediction.ranks.size());
  Layout layout;
  compression::Share share = compression::Share::kWhole;
  int pushing = world_size;
  if (options.strategy == StrategyKind::kDdp) {
    layout = packed_layout(plan_buckets(reversed_order(input), input.params,
                                        static_cast<int64_t>(options.ddp.first_bucket_mb * kMiB),
                                        static_cast<int64_t>(options.ddp.bucket_mb * kMiB)),
                           input.params);
  } else if (options.strategy == StrategyKind::kZero && options.zero.stage == 2) {
    layout = zero2_plan(options.zero, input, world_size).layout;
    share = compression::Share::kShard;
  } else if (options.strategy == StrategyKind::kPs) {
    const PsOptions& ps = options.ps;
    const bool dedicated = ps.placement == "dedicated";
    if (dedicated) pushing = world_size - static_cast<int>(ps.servers);
    layout = make_ps_plan(input.params, dedicated ? static_cast<int>(ps.servers) : world_size,
                          ps.chunk_mb, ps.consistency == "async")
                 .layout;
  } else {
    return;
  }
  for (int r = 0; r < pushing; ++r) {
    prediction.ranks[r].codec_state =
        codec_state_bytes(options.compression, layout, input, share, r, world_size);
  }
}

MemoryPrediction zero(const ZeroOptions& options, const ModelStateInput& input, int world_size) {
  if (options.stage == 1) return zero1(input, world_size);
  if (options.stage == 2) return zero2(options, input, world_size);
  return zero3(input, world_size);
}

MemoryPrediction model_state(const DistOptions& options, const ModelStateInput& input,
                             int world_size) {
  switch (options.strategy) {
    case StrategyKind::kSingle: {
      MemoryPrediction prediction = replicated("single", input, 1);
      if (world_size > 1) {
        prediction.ranks.clear();
        prediction.problem = "one rank only";
      }
      return prediction;
    }
    case StrategyKind::kDdp:
      return replicated("ddp", input, world_size);
    case StrategyKind::kZero:
      return zero(options.zero, input, world_size);
    case StrategyKind::kPs:
      return parameter_server(options.ps, input, world_size);
  }
  throw UserError(fmt::format("dist.strategy \"{}\": no memory prediction",
                              strategy_name(options.strategy)));
}

}  // namespace

int64_t ps_slot_bytes(const PsOptions& options, const PsPlan& plan, int rank,
                      int64_t element_size, bool on_gpus) {
  if (options.placement != "colocated") return 0;
  const int64_t k = options.consistency == "ssp" ? options.staleness : 0;
  const std::vector<int64_t> served = plan.server_numel();
  if (ps_uses_p2p(options, on_gpus)) {  // peer.cpp, peer_server.cpp
    const auto workers = static_cast<int64_t>(served.size());
    const int64_t previews =
        options.previews == 0 ? workers - 1 : std::min(options.previews, workers - 1);
    const int64_t per_round = options.partial_reads() && k > 0 && previews > 0 ? previews + 1 : 1;
    int64_t numel = 0;
    for (size_t s = 0; s < served.size(); ++s) {
      if (static_cast<int>(s) != rank) numel += per_round * (k + 1) * served[s];
    }
    if (served[static_cast<size_t>(rank)] > 0) {
      numel += (workers - 1) * (k + 2) * served[static_cast<size_t>(rank)];
    }
    return numel * element_size;
  }
  if (!options.use_collectives(on_gpus)) return 0;
  // collective.cpp: on CPU ranks a clock is applied d = min(k, 1) steps late.
  const int64_t model = std::accumulate(served.begin(), served.end(), int64_t{0}) * element_size;
  const int64_t delay = on_gpus ? 0 : std::min<int64_t>(k, 1);
  const int64_t grad_slots = on_gpus ? k + 1 : delay + 1;
  const bool predict = options.consistency == "ssp" && k > 0 && options.predict_weights;
  const int64_t param_slots = k - delay + 1 + (predict ? 1 : 0);
  return (param_slots + (grad_slots > 1 ? grad_slots : 0)) * model;
}

std::string ps_slots_problem(const PsOptions& options, const std::string& transport,
                             int64_t slot_bytes, int64_t available, const std::string& where) {
  if (available <= 0 || 2 * slot_bytes <= available) return {};
  const double gib = 1 << 30;
  return fmt::format("dist.ps.staleness = {} over transport \"{}\" needs {:.1f} GiB of SSP slots "
                     "on each rank (a version of the parameters and of the pushes per step a "
                     "worker may lead), more than half of the {:.1f} GiB of {}; lower "
                     "dist.ps.staleness (--dry-run shows the slots' size) or use transport "
                     "\"messages\", which keeps no slots",
                     options.staleness, transport, static_cast<double>(slot_bytes) / gib,
                     static_cast<double>(available) / gib, where);
}

int64_t memory_of(torch::Device device) {
  if (device.is_cpu()) {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    return pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  }
#ifdef DTRAIN_CUDA
  if (device.is_cuda()) {
    return static_cast<int64_t>(at::cuda::getDeviceProperties(device.index())->totalGlobalMem);
  }
#endif
  return 0;
}

MemoryPrediction predict_model_state(const DistOptions& options, const ModelStateInput& input,
                                     int world_size) {
  DTRAIN_CHECK(world_size >= 1 && !input.params.empty(),
               "memory prediction over {} ranks of {} parameters", world_size,
               input.params.size());
  MemoryPrediction prediction = model_state(options, input, world_size);
  add_codec_state(options, input, prediction);
  return prediction;
}

std::vector<MemoryPrediction> predict_every_strategy(const DistOptions& options,
                                                     const ModelStateInput& input,
                                                     int world_size) {
  std::vector<MemoryPrediction> predictions;
  DistOptions each = options;
  if (world_size == 1) {
    each.strategy = StrategyKind::kSingle;
    predictions.push_back(predict_model_state(each, input, world_size));
  }
  each.strategy = StrategyKind::kDdp;
  predictions.push_back(predict_model_state(each, input, world_size));
  each.strategy = StrategyKind::kZero;
  for (const int64_t stage : {1, 2, 3}) {
    each.zero.stage = stage;
    predictions.push_back(predict_model_state(each, input, world_size));
  }
  each.strategy = StrategyKind::kPs;
  predictions.push_back(predict_model_state(each, input, world_size));
  return predictions;
}

ModelStateBytes paper_bytes(int64_t numel, int64_t element_size, int64_t state_tensors,
                            int stage, int world_size) {
  const int64_t whole = numel * element_size;
  const int64_t shard = (numel + world_size - 1) / world_size * element_size;
  const int64_t state = state_tensors * (stage >= 1 ? shard : whole);
  return {stage >= 3 ? shard : whole, stage >= 2 ? shard : whole, state};
}

}  // namespace dtrain::dist
