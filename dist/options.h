// Options of the dist layer (config section [dist] and its strategies' subsections), each key
// declared once in declare(): the config layer reads, checks and documents them from there.
#pragma once

#include "common/error.h"
#include "common/option_spec.h"

#include <array>
#include <cstddef>
#include <string>

namespace dtrain::dist {

// [dist.ddp]: data parallelism with bucketed, overlapped gradient all-reduce.
struct DdpOptions {
  // Gradient bytes per all-reduce bucket (MiB). Larger buckets reach higher bandwidth;
  // smaller ones start communicating earlier in backward.
  double bucket_mb = 25.0;
  // The first bucket (the last layers' gradients, ready first) is small so communication
  // starts as early as possible.
  double first_bucket_mb = 1.0;
  // Launch each bucket's all-reduce from the gradient hooks, during backward; false: all
  // buckets after backward (the reference for measuring what overlap hides).
  bool overlap = true;
  // BatchNorm running statistics: "broadcast" rank 0's before every forward (PyTorch DDP's
  // default), "average" them over ranks before every forward, or keep them "local".
  std::string buffers = "broadcast";
  // Parameters without a gradient in a step are reduced as zeros instead of being an error.
  bool find_unused = false;
  // The dtype the gradients are all-reduced in: "param" (the parameters' own, PyTorch DDP's
  // choice), "bf16" (half the bytes; each bucket is cast before and widened after), or "auto":
  // bf16 where the model computes in bf16 (train.precision = "bf16", whose weight gradients
  // are bf16 products already; FSDP's reduce_dtype and DeepSpeed's bf16 mode do the same)
  // and no codec sets the bytes, else "param". The trainer resolves "auto" before it builds
  // the strategy (DistOptions::resolved); a strategy built directly reads it as "param".
  std::string reduce_dtype = "auto";
  // After each bucket launched during backward, this many BatchNorm backwards run on ATen's
  // kernels (common/shared_kernels.h), which share the GPU with the all-reduce, where cuDNN's
  // persistent kernels (bf16 on GPUs) would wait until it ends. 0: none. 2 measured best of
  // 0-4 on 2 x H200: ResNet-18 32x32 efficiency 0.944-0.948 against 0.931-0.935, ResNet-50
  // 0.980 against 0.977-0.979 (docs/PERFORMANCE.md).
  int64_t batchnorm_beside_allreduce = 2;

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// [dist.zero]: ZeRO, the optimizer state (stage 1), the gradients (stage 2) and the
// parameters (stage 3) sharded over the ranks.
struct ZeroOptions {
  // 1: optimizer state sharded (dist/zero/zero.h); 2: gradients too (dist/zero/zero2.h);
  // 3: parameters too, each model unit gathered only while it runs (dist/zero/zero3.h).
  int64_t stage = 1;
  // Stage 2: gradient MiB per reduce-scatter bucket. Each rank owns 1/ranks of every bucket;
  // smaller buckets start communicating earlier in backward, two are held at a time.
  double bucket_mb = 25.0;
  // Stage 3: units whose all-gather starts ahead of the one running (forward: the next ones;
  // backward: the previous ones); at most prefetch + 1 units are whole at once. 0: each unit
  // is gathered only when it is about to run. 2: ResNet-50 bf16 on 4 x H200 ran at 0.929x
  // DDP's throughput, against 0.851x with 1 (docs/PERFORMANCE.md).
  int64_t prefetch = 2;
  // Stage 3: "param" gathers the parameters' own dtype; "compute" gathers each unit in the
  // dtype its forward computes in (under autocast, bf16 or fp16: half the bytes of fp32) and
  // widens it into the parameters, which pays where the link is slow: over NVLink on 4 x H200
  // it ran at 0.903x DDP against param's 0.942x (docs/PERFORMANCE.md). The optimizer's shards
  // stay in the parameters' dtype either way.
  std::string gather_dtype = "param";

  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// [dist.ps]: the sharded parameter server (dist/ps/ps.h).
struct PsOptions {
  // "colocated": every worker also serves a shard; "dedicated": `servers` extra ranks (the
  // last ones) serve and take no data.
  std::string placement = "colocated";
  int64_t servers = 1;
  // Parameters are cut into chunks of at most this many MiB, placed on servers by bytes.
  double chunk_mb = 4.0;
  // "bsp": every step reads every update of the step before; "ssp": a worker at step c reads
  // every update of steps <= c - staleness - 1, and waits otherwise; "async": servers apply
  // each worker's push on arrival, each at lr / workers.
  std::string consistency = "bsp";
  int64_t staleness = 2;
  // ssp: "newest", a worker reads the newest version that has arrived, never one older than
  // its clock - staleness; "exact" (collectives), always clock - staleness, the same version
  // on every run and every rank (reproducible, but every read is `staleness` steps old even
  // when nobody is slow); "partial" (messages or p2p, SGD), also rounds in progress: the
  // servers send them stepped with the pushes in so far (over messages once every worker but
  // one has pushed, over p2p at every push), so only the late workers' shares are missing
  // from a read, not a whole round (dist/ps/server.h, dist/ps/peer_server.h).
  std::string ssp_reads = "newest";
  // ssp_reads = "partial" over p2p: the longest a worker waits before a forward, as a share of
  // its last step, for the round it has just pushed to be sent with every push but one in;
  // then (or at once, with 0) it reads the newest that has arrived. A preview lands a fraction
  // of a millisecond after the pushes it holds, while the forward starts at once: without the
  // wait a read rarely finds the round just pushed.
  double partial_wait = 0.05;
  // ssp over p2p: the first `sync_steps` steps (counted from the run's start, resumes
  // included) read as BSP does, then SSP's bound applies. The first steps of a deep network
  // at a high learning rate are the least stable (docs/PERFORMANCE.md: on ResNet-50 partial
  // reads left the loss after 12 steps at twice BSP's); synchronous at first, asynchronous
  // after, as post-local SGD (Lin et al. 2020).
  int64_t sync_steps = 0;
  // ssp_reads = "partial" over p2p: how many previews of each round a server sends, at the
  // round's last `previews` pushes but the final one (0: at every push, W - 1 of them). Each
  // is the whole shard to every worker: 1, the one at all pushes but one, sends half the
  // bytes of a round at 4 workers where a read rarely finds an earlier preview useful.
  int64_t previews = 0;
  // ssp_reads = "partial": what a round in progress takes for the pushes not yet in. "mean":
  // the mean of those in (their sum over their count), "zero": nothing (their sum over all
  // the workers, the round as it stands). A read then lacks the late shares' difference from
  // the others' mean, not the shares themselves: simulated on a ResNet with BatchNorm, two
  // late shares of four cost 1.17x BSP's steps to a loss so, against 1.35x
  // (docs/PERFORMANCE.md). The round itself always averages every worker's push.
  std::string preview_fill = "mean";
  // p2p on GPUs: the most thread blocks (so SMs) one NCCL kernel of the links takes (0:
  // NCCL's choice, up to one per channel of the pair). Each rank keeps a receive posted from
  // every peer's worker and every peer's server a step ahead, which spins in all its blocks
  // until the message comes: at 4 GPUs six kernels wait at once, beside the compute
  // (dist/ps/peer_links.h).
  int64_t link_ctas = 2;
  // p2p: what the links between the ranks are (dist/ps/peer_links.h). "shared": memory the
  // ranks of one machine map from one another, each message copied into a ring of the
  // receiver's (dist/comm/shared_link.h), so that no GPU work ever waits for a peer;
  // "communicator": the backend's point-to-point (NCCL on GPUs, whose receives posted ahead
  // wait on the device; MPI on CPU ranks); "auto": shared on GPUs of one machine, the
  // communicator otherwise.
  std::string p2p_links = "auto";
  // ssp over collectives: a forward s steps stale reads w_v + s (w_v - w_{v-1}), version v's
  // last step taken s more times (weight prediction, SpecTrain: Chen et al. 2018), the
  // parameters it would have read without the staleness, to first order.
  bool predict_weights = false;
  // How pushes and pulls travel (dist/ps/collective.h, dist/ps/peer.h): "messages",
  // point-to-point through host memory (any placement and consistency); "collectives",
  // reduces onto the servers and broadcasts from them on the device (colocated bsp and ssp);
  // "p2p", point-to-point on the device with a server thread per rank (colocated bsp and ssp,
  // SGD or AdamW); "auto", on GPUs p2p for partial reads and collectives where they serve,
  // messages otherwise.
  std::string transport = "auto";
  // Messages transport, bsp and ssp: the workers of each node (dist/comm/nodes.h) reduce
  // their gradients onto the node's lowest worker rank, which alone pushes, pulls and
  // broadcasts the parameters to them: one node's traffic to the servers instead of one per
  // worker.
  bool hierarchical = false;
  // Async, dedicated servers: a worker that dies (or falls silent for dist.timeout_s while
  // the others wait for it) is dropped and the others train on (dist/ps/live_workers.h);
  // needs mpirun --enable-recovery, without which mpirun ends the job at any rank's death.
  bool tolerate_worker_loss = false;

  // ssp with ssp_reads = "partial": the servers send rounds in progress.
  bool partial_reads() const { return consistency == "ssp" && ssp_reads == "partial"; }
  // Warnings, one line each, of keys whose value has no effect with `workers` workers over a
  // run of `total_steps` steps (previews past workers - 1, sync_steps that cover the run):
  // logged at start by rank 0 and by the dry run.
  std::vector<std::string> run_warnings(int workers, int64_t total_steps) const;
  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
  // Whether the collective transport carries this run (`on_gpus`: the workers' device).
  bool use_collectives(bool on_gpus) const;
};

// [dist.compression]: gradient codecs (dist/compression/codec.h), under "ddp", under "zero"
// at stage 2 and under "ps" (over the collective transport, and over the messages transport
// every codec but PowerSGD: dist/ps/push_codec.h).
struct CompressionOptions {
  // "none"; "fp16" or "bf16": a cast, scaled so the sum cannot overflow; "topk": the largest
  // `ratio` of each bucket's elements; "powersgd": rank-`rank` factors (Vogels et al. 2019);
  // "onebit": signs with one scale per `chunk` elements.
  std::string kind = "none";
  double ratio = 0.01;
  int64_t rank = 4;
  int64_t chunk = 1024;
  // topk, powersgd, onebit: what was not sent is added to the next step's gradient.
  bool error_feedback = true;
  // topk: momentum correction of Deep Gradient Compression (Lin et al. 2018), 0 = off; the
  // momentum is then accumulated before compression, so the optimizer should have none.
  double momentum = 0.0;
  // topk: steps over which the sent fraction falls exponentially from 25% to `ratio` (DGC's
  // sparsity warm-up), counted from the first compressed step.
  int64_t sparsity_warmup_steps = 0;
  // Steps of uncompressed exchange (DDP's all-reduce, ZeRO-2's reduce-scatter) before the
  // codec starts (any codec).
  int64_t warmup_steps = 0;

  bool enabled() const { return kind != "none"; }
  // Whether the codec keeps error-feedback residuals.
  bool has_residuals() const {
    return error_feedback && (kind == "topk" || kind == "powersgd" || kind == "onebit");
  }
  void declare(OptionSpecs& keys);
  FieldErrors validate() const;
};

// The one-line refusal of codec `compression` where the parameter server takes the messages
// transport (dist/ps/push_codec.h), or "" where that transport carries it.
std::string compressed_messages_error(const CompressionOptions& compression, const PsOptions& ps);

// How ranks cooperate. Each strategy's options are the subsection named after it.
enum class StrategyKind { kSingle, kDdp, kZero, kPs };
// The config names of the strategies, in the order of StrategyKind.
inline constexpr std::array<const char*, 4> kStrategyNames = {"single", "ddp", "zero", "ps"};
inline const char* strategy_name(StrategyKind kind) {
  return kStrategyNames[static_cast<size_t>(kind)];
}

// What dist needs to know of the rest of the config; the trainer fills it.
struct DistContext {
  // Dynamic loss scaling (train.precision = "fp16"): the overflow check reads every gradient.
  bool fp16_loss_scaling = false;
  // train.nonfinite = "skip": a step may end without an update.
  bool skip_nonfinite = false;
  // model.sync_batchnorm: every forward is a collective over the workers.
  bool sync_batchnorm = false;
  // train.precision = "bf16": the model computes in bf16 under autocast.
  bool bf16_compute = false;
  // LAMB's optim.max_grad_norm: the step needs the norm of the whole gradient.
  bool global_grad_clipping = false;
};

struct DistOptions {
  // "single": one rank, no communication; "ddp": data parallel; "zero": data parallel with
  // sharded optimizer state; "ps": workers and a sharded parameter server.
  StrategyKind strategy = StrategyKind::kSingle;
  // Upper bound on any collective; a rank that never joins ends the job after this long.
  double timeout_s = 300.0;
  DdpOptions ddp;
  ZeroOptions zero;
  PsOptions ps;
  CompressionOptions compression;

  void declare(OptionSpecs& keys);
  // The declared ranges and choices, the subsections' checks, and what the chosen strategy
  // requires of the rest of the config.
  FieldErrors validate(const DistContext& context) const;
  // The options with the keys that depend on the rest of the config ("auto") decided.
  DistOptions resolved(const DistContext& context) const;
  // Keys that the chosen strategy, consistency, transport or codec does not read, of those set
  // to something other than their defaults and those `written` ("ps.staleness"): they have
  // no effect (warnings, not errors).
  FieldErrors unused_keys(const std::vector<std::string>& written = {}) const;
};

}  // namespace dtrain::dist
