#include "dist/ps/plan.h"

#include "common/bytes.h"
#include "common/error.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>

namespace dtrain::dist {

namespace {

// Tensors whose sizes are multiples of this many elements keep every offset after them
// aligned to 64 bytes (4-byte elements): cuDNN's persistent BatchNorm loads its per-channel
// tensors in 16-byte vectors and faults on a weight that starts 8 bytes off, and vectorized
// kernels in general take the slow path on unaligned tensors.
constexpr int64_t kAlignedNumel = 16;

// Lays out `params` (in the bucket's order) with the sizes that keep alignment first; a
// bucket is ready once all its tensors are, whatever their order in it.
BucketLayout aligned_bucket(std::vector<int64_t> params, const std::vector<int64_t>& numels) {
  std::stable_partition(params.begin(), params.end(),
                        [&](int64_t i) { return numels[i] % kAlignedNumel == 0; });
  BucketLayout bucket;
  for (const int64_t i : params) {
    bucket.params.push_back(i);
    bucket.offsets.push_back(bucket.numel);
    bucket.numel += numels[i];
  }
  return bucket;
}

// Buckets of whole tensors in reverse registration order (backward's order, near enough),
// each closed once it holds a chunk's worth.
Layout bucket_layout(const std::vector<int64_t>& numels, int64_t chunk_numel) {
  Layout layout;
  std::vector<int64_t> params;
  int64_t numel = 0;
  for (int64_t i = static_cast<int64_t>(numels.size()) - 1; i >= 0; --i) {
    params.push_back(i);
    numel += numels[i];
    if (numel >= chunk_numel) {
      layout.push_back(aligned_bucket(std::move(params), numels));
      params.clear();
      numel = 0;
    }
  }
  if (!params.empty()) layout.push_back(aligned_bucket(std::move(params), numels));
  return layout;
}

// The chunks make_ps_plan cuts from `numels` at `chunk_numel` elements a chunk.
int64_t chunk_count(const std::vector<int64_t>& numels, int64_t chunk_numel) {
  int64_t count = 0;
  for (const BucketLayout& bucket : bucket_layout(numels, chunk_numel)) {
    count += (bucket.numel + chunk_numel - 1) / chunk_numel;
  }
  return count;
}

// Placement units: single chunks, or with `keep_tensors_whole` runs of chunks that continue
// one tensor (a chunk whose first piece starts inside its tensor continues the one before).
std::vector<std::vector<int64_t>> placement_groups(const PsPlan& plan, bool keep_tensors_whole) {
  std::vector<std::vector<int64_t>> groups;
  for (const PsPiece& piece : plan.pieces) {
    if (piece.chunk_offset != 0) continue;  // each chunk's first piece
    if (keep_tensors_whole && piece.param_offset > 0) {
      groups.back().push_back(piece.chunk);
    } else {
      groups.push_back({piece.chunk});
    }
  }
  return groups;
}

}  // namespace

std::vector<int64_t> PsPlan::chunks_of(int server) const {
  std::vector<int64_t> ids;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].server == server) ids.push_back(static_cast<int64_t>(c));
  }
  return ids;
}

std::vector<int64_t> PsPlan::server_numel() const {
  std::vector<int64_t> numel(servers, 0);
  for (const PsChunk& chunk : chunks) numel[chunk.server] += chunk.numel;
  return numel;
}

std::string PsPlan::describe(const std::vector<std::string>& names,
                             int64_t element_size) const {
  const auto mib = [element_size](int64_t numel) {
    return static_cast<double>(numel * element_size) / (1 << 20);
  };
  const std::vector<int64_t> load = server_numel();
  const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
  const int64_t most = *std::max_element(load.begin(), load.end());
  std::string text = fmt::format(
      "ps plan: {} tensors, {:.2f} MiB in {} chunks on {} server(s); the most loaded holds "
      "{:.3f}x an even share\n",
      names.size(), mib(total), chunks.size(), servers,
      total > 0 ? static_cast<double>(most) * servers / static_cast<double>(total) : 1.0);
  for (int s = 0; s < servers; ++s) {
    text += fmt::format("  server {}: {} chunks, {:.2f} MiB\n", s, chunks_of(s).size(),
                        mib(load[s]));
  }
  for (size_t c = 0; c < chunks.size(); ++c) {
    std::string held;
    for (const PsPiece& piece : pieces) {
      if (piece.chunk != static_cast<int64_t>(c)) continue;
      held += fmt::format(" {}[{}:{}]", names.at(piece.param), piece.param_offset,
                          piece.param_offset + piece.numel);
    }
    text += fmt::format("  chunk {} -> server {} ({} elements):{}\n", c, chunks[c].server,
                        chunks[c].numel, held);
  }
  return text;
}

void add_chunk(PsPlan& plan, int64_t bucket, int64_t offset, int64_t numel, int server,
               const std::vector<int64_t>& numels) {
  const BucketLayout& layout = plan.layout.at(bucket);
  const int64_t chunk = static_cast<int64_t>(plan.chunks.size());
  plan.chunks.push_back({bucket, offset, numel, server});
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const int64_t begin = std::max(offset, layout.offsets[i]);
    const int64_t end = std::min(offset + numel, layout.offsets[i] + numels[layout.params[i]]);
    if (begin >= end) continue;
    plan.pieces.push_back(
        {layout.params[i], chunk, begin - layout.offsets[i], begin - offset, end - begin});
  }
}

PsPlan make_ps_plan(const std::vector<int64_t>& numels, int servers, int64_t chunk_numel,
                    bool keep_tensors_whole) {
  DTRAIN_CHECK(servers >= 1 && chunk_numel >= 1, "ps plan: {} servers, chunks of {} elements",
               servers, chunk_numel);
  PsPlan plan;
  plan.servers = servers;
  plan.layout = bucket_layout(numels, chunk_numel);
  for (size_t b = 0; b < plan.layout.size(); ++b) {
    const BucketLayout& bucket = plan.layout[b];
    plan.first_chunk.push_back(static_cast<int64_t>(plan.chunks.size()));
    // Equal chunks rather than full ones and a remainder: evener placement.
    const int64_t count = (bucket.numel + chunk_numel - 1) / chunk_numel;
    int64_t offset = 0;
    for (int64_t k = 0; k < count; ++k) {
      const int64_t numel = bucket.numel / count + (k < bucket.numel % count ? 1 : 0);
      add_chunk(plan, static_cast<int64_t>(b), offset, numel, 0, numels);
      offset += numel;
    }
  }
  plan.first_chunk.push_back(static_cast<int64_t>(plan.chunks.size()));

  // LPT: the heaviest group first, onto the least loaded server.
  std::vector<std::vector<int64_t>> groups = placement_groups(plan, keep_tensors_whole);
  std::vector<int64_t> weight(groups.size(), 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const int64_t c : groups[g]) weight[g] += plan.chunks[c].numel;
  }
  std::vector<size_t> order(groups.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return weight[a] > weight[b]; });
  std::vector<int64_t> load(servers, 0);
  for (const size_t g : order) {
    const int server =
        static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    load[server] += weight[g];
    for (const int64_t c : groups[g]) plan.chunks[c].server = server;
  }
  return plan;
}

void move_into_flat(torch::Tensor& param, const torch::Tensor& flat, int64_t offset) {
  torch::Tensor view = flat.as_strided(param.sizes(), param.strides(), offset);
  view.copy_(param);
  param.set_(flat.storage(), flat.storage_offset() + offset, param.sizes(), param.strides());
}

std::vector<torch::Tensor> move_into_buckets(std::vector<torch::Tensor>& params,
                                             const Layout& layout) {
  torch::NoGradGuard no_grad;
  const auto options = params.front().options().requires_grad(false);
  std::vector<torch::Tensor> flats;
  for (const BucketLayout& bucket : layout) {
    torch::Tensor flat = torch::zeros({bucket.numel}, options);
    for (size_t i = 0; i < bucket.params.size(); ++i) {
      move_into_flat(params[bucket.params[i]], flat, bucket.offsets[i]);
    }
    flats.push_back(flat);
  }
  return flats;
}

std::string PsPlan::summary(const std::vector<std::string>& names, int64_t element_size) const {
  const std::string described = describe(names, element_size);
  return described.substr(0, described.find("  chunk "));
}

std::string uneven_plan_warning(const PsPlan& plan, double chunk_mb, int64_t element_size) {
  const std::vector<int64_t> load = plan.server_numel();
  const int64_t total = std::accumulate(load.begin(), load.end(), int64_t{0});
  const int64_t most = *std::max_element(load.begin(), load.end());
  const double share = static_cast<double>(most) * plan.servers / static_cast<double>(total);
  if (plan.servers == 1 || total == 0 || share < 1.5) return {};
  const int64_t idle = std::count(load.begin(), load.end(), int64_t{0});
  const double total_mb = static_cast<double>(total * element_size) / (1 << 20);
  return fmt::format("dist.ps.chunk_mb = {:g} cuts the model's {:.2f} MiB into {} chunk(s) for {} "
                     "servers: the most loaded holds {:.2f}x an even share{}; a chunk_mb of {:.2g} "
                     "or less (4 chunks a server) spreads it",
                     chunk_mb, total_mb, plan.chunks.size(), plan.servers, share,
                     idle > 0 ? fmt::format(" and {} hold(s) nothing", idle) : std::string(),
                     total_mb / (4.0 * plan.servers));
}

int64_t ps_chunk_numel(double chunk_mb, int64_t element_size) {
  return std::max<int64_t>(1, static_cast<int64_t>(chunk_mb * kMiB) / element_size);
}

std::string ps_chunking_problem(const std::vector<int64_t>& numels, int64_t element_size,
                                double chunk_mb) {
  const int64_t count = chunk_count(numels, ps_chunk_numel(chunk_mb, element_size));
  if (count <= kMaxPsChunks) return {};
  double enough = chunk_mb;
  while (chunk_count(numels, ps_chunk_numel(enough, element_size)) > kMaxPsChunks) enough *= 2;
  const int64_t total = std::accumulate(numels.begin(), numels.end(), int64_t{0});
  return fmt::format("dist.ps.chunk_mb = {} cuts the model's {:.2f} MiB into {} chunks, more "
                     "than the {} a plan may have (each is a message of its own per worker "
                     "and step); set it to {} or more",
                     chunk_mb, static_cast<double>(total * element_size) / kMiB, count,
                     kMaxPsChunks, enough);
}

PsPlan make_ps_plan(const std::vector<torch::Tensor>& params, int servers, double chunk_mb,
                    bool keep_tensors_whole) {
  std::vector<int64_t> numels;
  for (const torch::Tensor& param : params) numels.push_back(param.numel());
  const auto element_size = static_cast<int64_t>(params.front().element_size());
  const std::string problem = ps_chunking_problem(numels, element_size, chunk_mb);
  if (!problem.empty()) throw UserError(problem);
  return make_ps_plan(numels, servers, ps_chunk_numel(chunk_mb, element_size),
                      keep_tensors_whole);
}

size_t plan_bucket(const PsPlan& plan, const Bucket& bucket) {
  const auto b = static_cast<size_t>(
      std::find_if(plan.layout.begin(), plan.layout.end(),
                   [&](const BucketLayout& layout) { return layout == bucket.layout; }) -
      plan.layout.begin());
  DTRAIN_CHECK(b < plan.layout.size(), "ps: a bucket the plan does not know");
  return b;
}

}  // namespace dtrain::dist
