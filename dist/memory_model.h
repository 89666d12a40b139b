// Model-state memory per rank, predicted without running: the bytes of parameters, gradients
// and optimizer state each rank holds for the whole run under a strategy at a world size,
// counted as the strategies count them in their `memory/*` stats (replicated.h's memory()),
// so a run's stats can be checked against the prediction. `trainer --dry-run` prints it.
//
// The ZeRO paper's model (Rajbhandari et al. 2020, section 3.1): a model of Psi parameters
// trained in mixed precision with Adam holds 2 Psi bytes of fp16 parameters, 2 Psi of fp16
// gradients and K Psi of optimizer state, K = 12 (fp32 master weights, momentum, variance):
// (2 + 2 + K) Psi per rank under DDP; stage 1 (P_os) 2 Psi + 2 Psi + K Psi / N; stage 2
// (P_os+g) 2 Psi + (2 + K) Psi / N; stage 3 (P_os+g+p) (2 + 2 + K) Psi / N.
//
// How dtrain departs from it:
//   - Precision: parameters and gradients stay in the model's dtype (fp32) and autocast
//     computes in bf16/fp16 on the fly, so there is no separate master copy: 4 + 4 bytes, and
//     K = (state tensors per parameter) x 4 (Adam, LAMB: 8; momentum SGD, LARS: 4).
//   - Buckets: stage 1 reduce-scatters one flat bucket of the whole gradients into the rank's
//     shard, so it holds both: 4 Psi + 4 Psi / N of gradients. Stage 2 holds its shard of the
//     gradients plus two shared bucket buffers (dist.zero.bucket_mb each, the largest padded
//     bucket), not 2 Psi / N alone; and its optimizer steps a copy of its shard of the
//     parameters: 4 Psi + 4 Psi / N of parameters.
//   - Padding: stage 1's flat buffers give every rank the largest rank's share of whole
//     tensors (N x that, not Psi); stage 2 pads each bucket to a multiple of N. Both count.
//   - Sharding is by whole tensors (stage 1) or by bucket (stage 2), so ranks differ: the
//     prediction is per rank.
//   - The parameter server: a worker holds the whole model and its gradient buckets; a server
//     (every rank when colocated, the last dist.ps.servers ranks when dedicated) holds its
//     chunks' master parameters, their gradients and their optimizer state, in host memory
//     over the message transport (ModelStateBytes::host; dedicated servers run on the CPU
//     beside GPU workers). Its stats report the optimizer state only.
//   - Codec state (dist.compression): each slot (residual, DGC momentum) one element per
//     element of the buckets the codec sees (ZeRO-2's padding included), and PowerSGD's
//     buffers per bucket as its first step plans them (dist/compression/powersgd.h), for the
//     ranks that push (not a dedicated server). DDP's buckets as planned at the start, in
//     reverse registration order: a re-plan after the first step may move PowerSGD's by a
//     few index tensors.
//   - zero stage 3 (dist/zero/zero3.h): its shard of every unit's padded parameters, and as
//     much of the gradients, the optimizer state of its real elements; nothing whole between
//     steps (the gathered units and their gradient buffers are transient, as activations).
//   - The parameter server's SSP slots over the collective and p2p transports (colocated), which
//     each rank allocates at start (ModelStateBytes::ssp_slots, ps_slot_bytes below): versions
//     of the parameters and pushes kept so that a worker may lead by `staleness` steps, each
//     slot a model (collectives) or a shard (p2p). Not in the ps's stats.
// Not model state here, as not in the stats: the ps's messages in flight (over messages a
// server queues the pushes of a worker ahead as they come, at most `staleness` steps of
// them), activations and autograd's gradients of incomplete buckets (memory/host_peak_mb and
// memory/device_peak_allocated_mb measure all).
#pragma once

#include "dist/options.h"
#include "dist/ps/plan.h"

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::dist {

// What one rank holds for the whole run.
struct ModelStateBytes {
  int64_t parameters = 0;
  int64_t gradients = 0;
  int64_t optimizer_state = 0;
  // Of total(), the bytes in host memory even when the workers run on GPUs: a parameter
  // server's chunks over the message transport (a dedicated server runs on the CPU; a
  // colocated one keeps its shard in host memory beside its GPU, on the GPU over collectives).
  int64_t host = 0;
  // A gradient codec's state between steps (memory/codec_state_mb): its error-feedback
  // residuals, DGC's momentum, PowerSGD's factors and buffers. Zero without dist.compression.
  int64_t codec_state = 0;
  // A parameter server's SSP slots over collectives or p2p (ps_slot_bytes), on the device the
  // rank computes on. Zero for the other strategies and over messages.
  int64_t ssp_slots = 0;
  int64_t total() const {
    return parameters + gradients + optimizer_state + codec_state + ssp_slots;
  }
};

// One strategy's prediction at a world size.
struct MemoryPrediction {
  std::string strategy;  // "ddp", "zero stage 1", "zero stage 2", "ps (colocated)", ...
  std::vector<ModelStateBytes> ranks;  // by world rank; empty when `problem` says why
  std::string problem;                 // why it cannot run at this world size
  bool reports_parameters_and_gradients = true;  // false: its stats carry the state only
};

// What the prediction needs of the model and the optimizer.
struct ModelStateInput {
  // The trainable parameters in registration order; only their numel, dtype and device are
  // read (plan_buckets groups by dtype and device).
  std::vector<torch::Tensor> params;
  // Optimizer state tensors per parameter, each of the parameter's shape and dtype
  // (optim::state_tensors_per_parameter).
  int64_t state_tensors = 0;
  // Indices in `params` of each model unit's (dist/zero/zero3.h: parameters_by_unit), for
  // ZeRO stage 3; empty for a model not made of units, which stage 3 refuses.
  std::vector<std::vector<int64_t>> units;
  // Whether the ranks compute on GPUs: the parameter server's transport "auto" and its SSP
  // slots depend on it.
  bool on_gpus = true;
};

// The strategy `options` chooses, at `world_size` ranks. When it cannot run there (single on
// several ranks, dedicated servers that leave no worker, ZeRO stage 3 of a model without
// units), `ranks` is empty and `problem` says why.
MemoryPrediction predict_model_state(const DistOptions& options, const ModelStateInput& input,
                                     int world_size);

// Every strategy at `world_size`, each with the options `options` gives it: single (one rank
// only), ddp, zero stages 1, 2 and 3, ps with the configured placement.
std::vector<MemoryPrediction> predict_every_strategy(const DistOptions& options,
                                                     const ModelStateInput& input, int world_size);

// The bytes of SSP slots that rank `rank` of a colocated parameter server allocates at start
// for `plan` (of parameters `element_size` bytes each) over the transport `options` resolves
// to on GPUs or CPU ranks: over collectives staleness + 1 versions of the model (fewer on CPU
// ranks, one more with predict_weights) and, past staleness 0, as many of its gradients;
// over p2p, from every other server, staleness + 1 rounds of its shard (times the previews a
// round), and for its own shard staleness + 2 pushes from every other worker. 0 over messages.
int64_t ps_slot_bytes(const PsOptions& options, const PsPlan& plan, int rank,
                      int64_t element_size, bool on_gpus);

// The line that refuses a start whose SSP slots over `transport`, `slot_bytes` on the rank,
// cannot reasonably be allocated in the `available` bytes of the memory they live in
// (`where`: "host memory", "GPU memory"); empty when they fit in half of it.
std::string ps_slots_problem(const PsOptions& options, const std::string& transport,
                             int64_t slot_bytes, int64_t available, const std::string& where);

// The bytes of memory on `device`: the host's physical memory for the CPU, the GPU's total
// otherwise (0 where not known).
int64_t memory_of(torch::Device device);

// The paper's figures per rank in our precision (no buckets, no padding): `stage` 0 is DDP,
// 1 to 3 ZeRO's stages; `element_size` the parameters' bytes each.
ModelStateBytes paper_bytes(int64_t numel, int64_t element_size, int64_t state_tensors,
                            int stage, int world_size);

}  // namespace dtrain::dist
