#include "dist/options.h"

#include <fmt/format.h>

#include <algorithm>

namespace dtrain::dist {

void DdpOptions::declare(OptionSpecs& keys) {
  keys.add("bucket_mb", &bucket_mb, "gradient MiB per all-reduce bucket").range(1e-6, 4096.0);
  keys.add("first_bucket_mb", &first_bucket_mb,
           "MiB of the first bucket (last layers, ready first): small, to start early")
      .range(1e-6, 4096.0);
  keys.add("overlap", &overlap, "all-reduce buckets during backward (false: after it)");
  keys.add("buffers", &buffers,
           "BatchNorm statistics before each forward: broadcast from rank 0, average over "
           "ranks, or keep local")
      .one_of({"broadcast", "average", "local"});
  keys.add("find_unused", &find_unused,
           "reduce parameters that got no gradient as zeros instead of stopping");
  keys.add("reduce_dtype", &reduce_dtype,
           "dtype of the all-reduced gradients: param (the parameters'), bf16 (half the "
           "bytes), or auto (bf16 under train.precision = \"bf16\" without compression, "
           "else param)")
      .one_of({"auto", "param", "bf16"});
  keys.add("batchnorm_beside_allreduce", &batchnorm_beside_allreduce,
           "BatchNorm backwards after each bucket launched during backward that run on ATen's "
           "kernels, which share the GPU with the all-reduce (cuDNN's persistent bf16 kernels "
           "wait for it); 0: none")
      .range(0, 1024);
}

FieldErrors DdpOptions::validate() const { return check_declared(*this); }

void ZeroOptions::declare(OptionSpecs& keys) {
  keys.add("stage", &stage,
           "ZeRO stage: 1 shards the optimizer state, 2 the gradients too, 3 the parameters "
           "too (each model unit gathered only while it runs)")
      .range(1, 3);
  keys.add("bucket_mb", &bucket_mb,
           "stage 2: gradient MiB per reduce-scatter bucket, each split evenly over the ranks")
      .range(1e-6, 4096.0);
  keys.add("prefetch", &prefetch,
           "stage 3: units gathered ahead of the one running (0: none); at most prefetch + 1 "
           "units are whole at once")
      .range(0, 1024);
  keys.add("gather_dtype", &gather_dtype,
           "stage 3: param, each unit gathered in the parameters' dtype (fp32); compute, in "
           "the dtype its forward computes in (under train.precision bf16 or fp16: half the "
           "bytes, for slow links) and widened into the parameters")
      .one_of({"param", "compute"});
}

FieldErrors ZeroOptions::validate() const { return check_declared(*this); }

void PsOptions::declare(OptionSpecs& keys) {
  keys.add("placement", &placement,
           "colocated: every worker also serves a shard; dedicated: dist.ps.servers extra ranks "
           "(the last) serve from host memory on the CPU and take no data, beside workers on "
           "any device")
      .one_of({"colocated", "dedicated"});
  keys.add("servers", &servers, "server ranks under placement = \"dedicated\"").range(1, 4096);
  keys.add("chunk_mb", &chunk_mb,
           "MiB of parameters per chunk, the unit of placement (a model in at most 4096 "
           "chunks)")
      .range(1e-6, 4096.0);
  keys.add("consistency", &consistency,
           "bsp: each step reads the last step's updates; ssp: at most `staleness` steps "
           "behind; async: each push applied on arrival")
      .one_of({"bsp", "ssp", "async"});
  // Over collectives and p2p each step of lead is a slot of the parameters and of the pushes
  // on every rank, allocated at start (dist/memory_model.h: ps_slot_bytes).
  keys.add("staleness", &staleness,
           "ssp: steps a worker may run ahead of the slowest (collectives, p2p: a slot of "
           "the model or the shard per step on every rank)")
      .range(0, 1000);
  keys.add("ssp_reads", &ssp_reads,
           "ssp: newest, the newest version that has arrived (at least clock - staleness); "
           "exact (collectives), always clock - staleness (reproducible, always that stale); "
           "partial (messages or p2p, optim.name = \"sgd\"), also a round in progress: "
           "over messages once all workers but one have pushed it, over p2p at every push")
      .one_of({"newest", "exact", "partial"});
  keys.add("partial_wait", &partial_wait,
           "ssp_reads = \"partial\" over p2p: the longest wait before a forward, as a share "
           "of the last step, for the round just pushed with all pushes but one in; then the "
           "newest that has arrived is read")
      .range(0.0, 1.0);
  keys.add("sync_steps", &sync_steps,
           "ssp over p2p: the first steps of the run, read as bsp (the last whole round); "
           "the staleness bound applies from then on")
      .range(0, 1000000000);
  keys.add("previews", &previews,
           "ssp_reads = \"partial\" over p2p: the previews of each round a server sends, at "
           "its last `previews` pushes but the final one (0: at every push, workers - 1)")
      .range(0, 4096);
  keys.add("preview_fill", &preview_fill,
           "ssp_reads = \"partial\": what a round in progress takes for the pushes not yet in: "
           "mean, the mean of those in; zero, nothing (the round as it stands)")
      .one_of({"mean", "zero"});
  keys.add("link_ctas", &link_ctas,
           "p2p on GPUs: the most thread blocks (SMs) one NCCL kernel of the links takes (0: "
           "NCCL's choice); a receive posted a step ahead spins in every block it holds")
      .range(0, 64);
  keys.add("p2p_links", &p2p_links,
           "p2p: shared, through memory the ranks of one machine map from one another (no "
           "GPU work waits for a peer); communicator, the backend's point-to-point (NCCL, "
           "MPI); auto: shared on GPUs of one machine, the communicator otherwise")
      .one_of({"auto", "shared", "communicator"});
  keys.add("predict_weights", &predict_weights,
           "ssp over collectives: a read s steps stale takes w + s (w - w_previous), its "
           "version's last step repeated s times (SpecTrain's weight prediction)");
  keys.add("transport", &transport,
           "messages: point-to-point through host memory; collectives: reduce onto the "
           "servers and broadcast from them on the device (colocated bsp and ssp); p2p: "
           "point-to-point on the device (colocated bsp and ssp, SGD), which partial reads "
           "need on GPUs; auto: on GPUs p2p for partial reads and collectives where they "
           "serve, messages otherwise")
      .one_of({"auto", "messages", "collectives", "p2p"});
  keys.add("hierarchical", &hierarchical,
           "messages transport, bsp and ssp: each node's workers reduce gradients onto one "
           "leader, which alone pushes and pulls and broadcasts the parameters to them (auto "
           "then picks messages)");
  keys.add("tolerate_worker_loss", &tolerate_worker_loss,
           "async, dedicated servers: a dead worker is dropped and the others train on "
           "(launch with mpirun --enable-recovery); rank 0 excepted");
}

std::vector<std::string> PsOptions::run_warnings(int workers, int64_t total_steps) const {
  std::vector<std::string> warnings;
  if (consistency != "ssp") return warnings;  // unused_keys() says so
  if (previews > workers - 1) {
    warnings.push_back(fmt::format(
        "dist.ps.previews = {} has no effect past {}: a round of {} workers has at most "
        "workers - 1 = {} previews, which previews = 0 already sends",
        previews, workers - 1, workers, workers - 1));
  }
  if (sync_steps > 0 && sync_steps >= total_steps) {
    warnings.push_back(fmt::format(
        "dist.ps.sync_steps = {} covers the run's {} steps: every step reads as bsp and "
        "dist.ps.staleness has no effect; lower sync_steps or use consistency = \"bsp\"",
        sync_steps, total_steps));
  }
  return warnings;
}

bool PsOptions::use_collectives(bool on_gpus) const {
  // The collective transport sums on the links already: a hierarchy is the messages'.
  const bool serve = placement == "colocated" && consistency != "async" && !hierarchical &&
                     !partial_reads();
  return transport == "collectives" || (transport == "auto" && on_gpus && serve);
}


std::string compressed_messages_error(const CompressionOptions& compression,
                                      const PsOptions& ps) {
  if (compression.kind == "powersgd") {
    return "\"powersgd\" is not available over the parameter server's messages transport: its "
           "power iteration all-reduces its factors across the workers, which pushes to "
           "servers have no form of; use it with placement \"colocated\", consistency \"bsp\" "
           "or \"ssp\" and dist.ps.transport = \"collectives\", or another codec";
  }
  if (compression.enabled() && ps.tolerate_worker_loss) {
    return fmt::format("\"{}\" with dist.ps.tolerate_worker_loss = true: a checkpoint gathers "
                       "every worker's codec state in a collective that a lost worker never "
                       "joins; use kind = \"none\" with it",
                       compression.kind);
  }
  return "";
}

FieldErrors PsOptions::validate() const { return check_declared(*this); }

void CompressionOptions::declare(OptionSpecs& keys) {
  keys.add("kind", &kind,
           "gradient codec: none, fp16 or bf16 (scaled casts), topk (largest `ratio`), powersgd "
           "(rank-`rank` factors) or onebit (signs, a scale per `chunk` elements)")
      .one_of({"none", "fp16", "bf16", "topk", "powersgd", "onebit"});
  keys.add("ratio", &ratio, "topk: fraction of each bucket's elements sent").range(1e-6, 1.0);
  keys.add("rank", &rank, "powersgd: rank of the factors of each gradient matrix").range(1, 1024);
  keys.add("chunk", &chunk,
           "onebit: elements per scale, a multiple of 8 (a bucket smaller than that: one scale)")
      .range(8, 1 << 24);
  keys.add("error_feedback", &error_feedback,
           "topk, powersgd, onebit: add what was not sent to the next step's gradient");
  keys.add("momentum", &momentum,
           "topk: DGC momentum correction (0: off; then give the optimizer no momentum)")
      .range(0.0, 0.999);
  keys.add("sparsity_warmup_steps", &sparsity_warmup_steps,
           "topk: steps over which the sent fraction falls from 25% to `ratio`")
      .range(0, 1000000000);
  keys.add("warmup_steps", &warmup_steps,
           "steps of uncompressed all-reduce (ZeRO-2: reduce-scatter; ps: reduces onto the "
           "servers) before the codec starts")
      .range(0, 1000000000);
}

FieldErrors CompressionOptions::validate() const {
  FieldErrors errors = check_declared(*this);
  if (chunk % 8 != 0) {
    errors.push_back({"chunk", fmt::format("{} is not a multiple of 8 (the signs are packed 8 "
                                           "to a byte); use {}",
                                           chunk, (chunk + 7) / 8 * 8)});
  }
  return errors;
}

void DistOptions::declare(OptionSpecs& keys) {
  keys.add("strategy", &strategy, kStrategyNames,
           "how ranks cooperate: single (one rank), ddp (data parallel), zero (data "
           "parallel, optimizer state sharded over the ranks, at dist.zero.stage = 2 the "
           "gradients too, at 3 the parameters too) or ps (parameter server)");
  keys.add("timeout_s", &timeout_s,
           "bound on MPI's start-up and on any collective; a rank that never joins ends the job")
      .range(1.0, 86400.0);
  keys.add_section("ddp", ddp);
  keys.add_section("zero", zero);
  keys.add_section("ps", ps);
  keys.add_section("compression", compression);
}

FieldErrors DistOptions::validate(const DistContext& context) const {
  FieldErrors errors = check_declared(*this);
  for (FieldError& error : ddp.validate()) errors.push_back({"ddp." + error.key, error.problem});
  for (FieldError& error : zero.validate()) errors.push_back({"zero." + error.key, error.problem});
  for (FieldError& error : ps.validate()) errors.push_back({"ps." + error.key, error.problem});
  for (FieldError& error : compression.validate()) {
    errors.push_back({"compression." + error.key, error.problem});
  }
  if (strategy == StrategyKind::kDdp && ddp.reduce_dtype == "bf16" && compression.enabled()) {
    errors.push_back({"ddp.reduce_dtype",
                      fmt::format("\"bf16\" and dist.compression.kind = \"{}\" both set the "
                                  "gradients' bytes; choose one (compression.kind = \"bf16\" "
                                  "also casts, with a scale)",
                                  compression.kind)});
  }
  const bool zero_other_stage = strategy == StrategyKind::kZero && zero.stage != 2;
  if (compression.enabled() && zero_other_stage) {
    errors.push_back({"compression.kind",
                      fmt::format("\"{}\": dist.compression is available with dist.strategy = "
                                  "\"ddp\", \"ps\" and \"zero\" at dist.zero.stage = 2 in this "
                                  "version; use one of those, or kind = \"none\" under \"zero\" "
                                  "stage {}",
                                  compression.kind, zero.stage)});
  }
  const bool ps_messages = ps.transport == "messages" || ps.placement != "colocated" ||
                           ps.consistency == "async" || ps.hierarchical;
  if (strategy == StrategyKind::kPs && ps.transport == "p2p" && compression.enabled()) {
    errors.push_back({"compression.kind",
                      fmt::format("\"{}\" is not available over the parameter server's "
                                  "\"p2p\" transport; use transport \"collectives\" or "
                                  "\"messages\", or kind = \"none\"",
                                  compression.kind)});
  }
  if (strategy == StrategyKind::kPs && ps_messages) {
    const std::string refused = compressed_messages_error(compression, ps);
    if (!refused.empty()) errors.push_back({"compression.kind", refused});
  }
  if (compression.has_residuals() && (context.fp16_loss_scaling || context.skip_nonfinite)) {
    // A residual keeps what a step did not send: a loss-scaled or non-finite gradient in it
    // would spoil every later step. The hint changes only what is set: fp16 loss scaling is
    // CUDA's (the trainer reports none on CPU, where fp16 is refused on its own), so a CPU
    // run is told to stop on non-finite losses alone.
    const bool both = context.fp16_loss_scaling && context.skip_nonfinite;
    const std::string with =
        std::string(context.fp16_loss_scaling ? "fp16 loss scaling (train.precision = "
                                                "\"fp16\")"
                                              : "") +
        (both ? " and " : "") + (context.skip_nonfinite ? "train.nonfinite = \"skip\"" : "");
    const std::string use =
        std::string(context.fp16_loss_scaling ? "train.precision = \"bf16\" (or \"fp32\")"
                                              : "") +
        (both ? " and " : "") + (context.skip_nonfinite ? "train.nonfinite = \"stop\"" : "");
    errors.push_back({"compression.error_feedback",
                      fmt::format("\"{}\" with error feedback is not available with {}; use {}",
                                  compression.kind, with, use)});
  }
  if (strategy == StrategyKind::kPs) {
    // A worker's pushes of a step are applied when its step() arrives: every step must end
    // in one, and nothing may make the workers wait on each other between steps.
    if (context.fp16_loss_scaling) {
      errors.push_back({"strategy", "fp16 loss scaling (train.precision = \"fp16\") is not "
                                    "available with \"ps\" (a step skipped for overflow would "
                                    "leave the servers waiting); use train.precision = \"bf16\""});
    }
    if (context.skip_nonfinite) {
      errors.push_back({"strategy", "train.nonfinite = \"skip\" is not available with \"ps\" "
                                    "(a skipped step would leave the servers waiting); use "
                                    "\"stop\""});
    }
    if (ps.transport == "collectives" &&
        (ps.placement != "colocated" || ps.consistency == "async")) {
      errors.push_back({"ps.transport",
                        "\"collectives\" serves placement \"colocated\" with consistency "
                        "\"bsp\" or \"ssp\" only (a collective joins every worker); use "
                        "\"messages\" or \"auto\""});
    }
    if (ps.transport == "p2p" && (ps.placement != "colocated" || ps.consistency == "async" ||
                                  ps.hierarchical)) {
      errors.push_back({"ps.transport",
                        "\"p2p\" serves placement \"colocated\" with consistency \"bsp\" or "
                        "\"ssp\" and no hierarchy; use \"messages\" or \"auto\""});
    }
    if (ps.transport == "p2p" && ps.consistency == "ssp" &&
        (ps.ssp_reads == "exact" || ps.predict_weights)) {
      errors.push_back({ps.predict_weights ? "ps.predict_weights" : "ps.ssp_reads",
                        "the \"p2p\" transport reads the newest rounds that have arrived: "
                        "ssp_reads = \"exact\" and predict_weights = true need transport "
                        "\"collectives\""});
    }
    if (ps.sync_steps > 0 && ps.consistency == "ssp" && ps.transport != "p2p") {
      errors.push_back({"ps.sync_steps",
                        fmt::format("{} needs dist.ps.transport = \"p2p\" (set it; this run has "
                                    "\"{}\"): the other transports read within the bound from "
                                    "the first step",
                                    ps.sync_steps, ps.transport)});
    }
    if (ps.partial_reads() && (ps.transport == "collectives" || ps.hierarchical)) {
      // Over collectives a push is a reduce, which completes only once every worker has
      // joined it: no server sees the on-time pushes first.
      errors.push_back({"ps.ssp_reads",
                        fmt::format("\"partial\" needs transport \"p2p\" or \"messages\" without a "
                                    "hierarchy (a server must see each worker's push as it "
                                    "arrives); this run has transport \"{}\"{}",
                                    ps.transport, ps.hierarchical ? " and hierarchical = true"
                                                                  : "")});
    }
    if (ps.hierarchical && ps.transport == "collectives") {
      errors.push_back({"ps.hierarchical",
                        "true with transport \"collectives\": its reduces onto the servers "
                        "already sum on the links, node by node; use transport = \"messages\" "
                        "(or \"auto\") or hierarchical = false"});
    } else if (ps.hierarchical && ps.consistency == "async") {
      // A leader's push of its node's sum would have to count as node-size pushes.
      errors.push_back({"ps.hierarchical",
                        "true with consistency \"async\": async applies each worker's push "
                        "alone, and a leader's push of its node's sum is several workers'; use "
                        "consistency \"bsp\" or \"ssp\", or hierarchical = false"});
    }
    if (ps.tolerate_worker_loss && (ps.consistency != "async" || ps.placement != "dedicated")) {
      // bsp and ssp wait for every worker by definition; a colocated worker takes its shard
      // of the parameters with it.
      errors.push_back({"ps.tolerate_worker_loss",
                        fmt::format("true needs consistency \"async\" (bsp and ssp wait for "
                                    "every worker) and placement \"dedicated\" (a colocated "
                                    "worker's shard dies with it); this run has \"{}\" and \"{}\"",
                                    ps.consistency, ps.placement)});
    }
    if (context.global_grad_clipping && ps.consistency == "async") {
      errors.push_back({"ps.consistency",
                        "\"async\" with optim.max_grad_norm (LAMB's global gradient clipping): "
                        "the servers apply pushes independently, so no step sees the whole "
                        "gradient's norm; set max_grad_norm = 0 or use \"bsp\" or \"ssp\""});
    }
    if (context.sync_batchnorm && ps.consistency != "bsp") {
      errors.push_back({"ps.consistency",
                        fmt::format("\"{}\" with model.sync_batchnorm: SyncBatchNorm makes every "
                                    "forward wait for every worker; use \"bsp\" or turn "
                                    "SyncBatchNorm off",
                                    ps.consistency)});
    }
  }
  return errors;
}

DistOptions DistOptions::resolved(const DistContext& context) const {
  DistOptions options = *this;
  // Only under "ddp": another strategy's saved config keeps the default, and reads as set by
  // nobody when loaded again.
  if (strategy == StrategyKind::kDdp && options.ddp.reduce_dtype == "auto") {
    const bool narrow = context.bf16_compute && !compression.enabled();
    options.ddp.reduce_dtype = narrow ? "bf16" : "param";
  }
  return options;
}

namespace {

// Whether codec `kind` reads [dist.compression] key `name` (dist/compression/codec.cpp builds
// the codecs, dist/ps/push_codec.cpp their parameter-server pushes): the casts read only the
// warm-up, each other codec its own parameter and the error feedback, topk also DGC's keys.
bool codec_reads(const std::string& kind, const std::string& name) {
  if (kind == "none") return name == "kind";
  if (name == "kind" || name == "warmup_steps") return true;
  if (name == "error_feedback") return kind == "topk" || kind == "powersgd" || kind == "onebit";
  if (name == "ratio" || name == "momentum" || name == "sparsity_warmup_steps") {
    return kind == "topk";
  }
  if (name == "rank") return kind == "powersgd";
  if (name == "chunk") return kind == "onebit";
  return true;
}

}  // namespace

FieldErrors DistOptions::unused_keys(const std::vector<std::string>& written) const {
  FieldErrors warnings;
  for (const std::string& key : changed_or_written_keys(*this, written)) {
    const size_t dot = key.find('.');
    if (dot == std::string::npos) continue;
    const std::string section = key.substr(0, dot);
    const bool of_a_strategy = std::find(kStrategyNames.begin(), kStrategyNames.end(),
                                         section) != kStrategyNames.end();
    const bool unused_codec = section == "compression" && strategy == StrategyKind::kSingle;
    if ((of_a_strategy && section != strategy_name(strategy)) || unused_codec) {
      warnings.push_back({key, fmt::format("has no effect under dist.strategy = \"{}\"",
                                           strategy_name(strategy))});
    } else if ((key == "zero.bucket_mb" && zero.stage != 2) ||
               ((key == "zero.prefetch" || key == "zero.gather_dtype") && zero.stage != 3)) {
      warnings.push_back({key, fmt::format("has no effect under dist.zero.stage = {}",
                                           zero.stage)});
    } else if ((key == "ps.staleness" || key == "ps.ssp_reads" || key == "ps.predict_weights" ||
                key == "ps.partial_wait" || key == "ps.previews" || key == "ps.sync_steps" ||
                key == "ps.preview_fill") &&
               ps.consistency != "ssp") {
      warnings.push_back({key, fmt::format("has no effect under dist.ps.consistency = \"{}\"",
                                           ps.consistency)});
    } else if ((key == "ps.partial_wait" || key == "ps.previews" || key == "ps.preview_fill") &&
               ps.ssp_reads != "partial") {
      warnings.push_back({key, fmt::format("has no effect under dist.ps.ssp_reads = \"{}\" (it "
                                           "shapes partial reads)",
                                           ps.ssp_reads)});
    } else if (key == "ps.servers" && ps.placement != "dedicated") {
      warnings.push_back({key, fmt::format("has no effect under dist.ps.placement = \"{}\" "
                                           "(every worker serves a shard)",
                                           ps.placement)});
    } else if ((key == "ps.link_ctas" || key == "ps.p2p_links") && ps.transport != "p2p" &&
               ps.transport != "auto") {
      warnings.push_back({key, fmt::format("has no effect under dist.ps.transport = \"{}\"",
                                           ps.transport)});
    } else if (key == "ps.link_ctas" && ps.p2p_links == "shared") {
      warnings.push_back({key, "has no effect under dist.ps.p2p_links = \"shared\" (no kernel "
                               "carries the links)"});
    } else if (section == "compression" && !codec_reads(compression.kind, key.substr(dot + 1))) {
      warnings.push_back({key, fmt::format("has no effect under dist.compression.kind = \"{}\"",
                                           compression.kind)});
    } else if (key == "compression.momentum" && !compression.error_feedback) {
      // TopkCodec and the ps pushes keep the velocity beside the residual, or not at all.
      warnings.push_back({key, "has no effect under dist.compression.error_feedback = false "
                               "(DGC's momentum correction accumulates into the residual)"});
    }
  }
  return warnings;
}

}  // namespace dtrain::dist
