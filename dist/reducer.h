// The gradient reducer: the machinery every data-parallel strategy shares, in the manner of
// PyTorch DDP's Reducer with its communication hooks. It owns
//   - the bucket layout: each parameter's gradient is a view into a flat bucket tensor (with
//     the parameter's strides, channels_last included), so communication and the optimizer
//     work in place;
//   - the post-hooks on the parameters' gradient accumulators that count buckets down;
//   - launch order: a complete bucket is handed to the CommHook as soon as every earlier one
//     has been, in the same order on every rank, from inside backward (`overlap`) or after it;
//   - completion: after backward it launches what is left, waits for every bucket and lets
//     the hook finish each one;
//   - unused parameters (an error naming them, or reduced as zeros) and one re-plan from the
//     gradient order observed in the first step (rank 0's, so every rank agrees).
// What a bucket's communication is belongs to the hook: an all-reduce (DDP), a
// reduce-scatter to the owners (ZeRO), a push and pull (parameter server); a codec wraps
// another hook and keeps per-bucket state.
//
// Gradients are released (not zeroed) after each step: autograd then hands each parameter a
// fresh gradient without a copy; a complete bucket takes them in with one multi-tensor copy
// and the views become the gradients again (one read and one write per element, about one
// launch per bucket). Gradient accumulation: hooks do nothing on micro-steps other than the
// last; autograd accumulates, and the sums are copied in and communicated once.
//
// Buffers: by default every bucket keeps its own flat tensor for the whole run (DDP's
// optimizer reads the averaged gradients there). With `shared_buffers` = k, the buckets take
// turns in k flat tensors of the largest bucket's size (bucket b in buffer b % k), as
// DeepSpeed's stage 2 alternates its gradient buckets: launching bucket b first completes
// bucket b - k, and a completed bucket's gradients are released. Full-size gradients then
// exist only in flight (at most k buckets, plus what autograd produced for incomplete
// buckets); the hook keeps what it needs (ZeRO-2: its reduce-scattered shard).
#pragma once

#include "dist/buckets.h"
#include "dist/comm/communicator.h"
#include "dist/step_comm.h"

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::dist {

// Where the gradients of a bucket's parameters live in its flat tensor of `numel` elements;
// gaps (padding, alignment to rank boundaries) hold zeros.
struct BucketLayout {
  std::vector<int64_t> params;   // indices into the reducer's parameters
  std::vector<int64_t> offsets;  // element offset of each, in the same order
  int64_t numel = 0;

  bool operator==(const BucketLayout& other) const {
    return params == other.params && offsets == other.offsets && numel == other.numel;
  }
};
using Layout = std::vector<BucketLayout>;

// `plan`'s buckets with their parameters packed back to back.
Layout packed_layout(const BucketPlan& plan, const std::vector<torch::Tensor>& params);

struct Bucket {
  BucketLayout layout;
  torch::Tensor flat;  // [layout.numel], the parameters' gradients as views
  int64_t index = 0;   // in launch order (a hook's per-bucket state is kept by it)
};

// What happens to a complete bucket. Called on every rank for the same buckets in the same
// order, on the thread running backward.
class CommHook {
 public:
  virtual ~CommHook() = default;
  // Where the reducer copies the bucket's gradients, if not into bucket.flat: a tensor of
  // bucket.flat's numel, zero in its gaps, in any floating dtype (the copy casts). The hook's
  // finish() must then fill bucket.flat. Undefined (the default): bucket.flat.
  virtual torch::Tensor staging(const Bucket& bucket) {
    (void)bucket;
    return {};
  }
  // Starts the bucket's communication; in flight until its wait().
  virtual std::unique_ptr<Work> launch(Bucket& bucket) = 0;
  // After the reducer waited for the work: the strategy's use of the result.
  virtual void finish(Bucket& bucket) { (void)bucket; }
  // For the stats: the collective launch() issues, and its payload.
  virtual Collective collective() const = 0;
  virtual int64_t payload_bytes(const Bucket& bucket) const {
    return bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size());
  }
  // After finish(): the bucket's communication into the step's stats, by default one
  // operation of collective() carrying payload_bytes(). A hook whose work is several
  // operations, on several communicators, records each.
  virtual void record(Bucket& bucket, std::unique_ptr<Work> work, StepComm& into) {
    into.add(collective(), Traffic::kGradients, payload_bytes(bucket), std::move(work));
  }
};

struct ReducerOptions {
  std::string owner = "reducer";  // the strategy, in error messages
  bool overlap = true;            // launch from inside backward (false: after it)
  bool find_unused = false;       // a parameter without gradient is reduced as zeros
  std::string unused_hint;        // otherwise the error ends with this advice
  int64_t shared_buffers = 0;     // 0: a flat tensor per bucket; k: k shared in rotation
};

// Re-plans the layout from the observed gradient order (indices into the parameters).
using Planner = std::function<Layout(const std::vector<int64_t>& order)>;

class GradientReducer {
 public:
  // `params` (with `names`) are the model's trainable parameters; `layout` the first plan.
  // With a `replan`, the layout is re-planned once from the first step's gradient order
  // (not with find_unused: the observed order is then partial and may differ across ranks).
  GradientReducer(std::vector<torch::Tensor> params, std::vector<std::string> names,
                  std::shared_ptr<Communicator> comm, CommHook& hook, ReducerOptions options,
                  const Layout& layout, Planner replan = nullptr);
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  void before_backward(bool last_micro_step);
  // On the last micro-step: launches what is left, waits for every bucket, lets the hook
  // finish them, and records the operations in `record`. Blocking on MPI; on NCCL the
  // compute stream waits, not the host.
  void after_backward(bool last_micro_step, StepComm& record);
  // After a replayed CUDA graph that captured this reducer's whole step (before_backward,
  // the hooks and after_backward): records each bucket's operation, as the hook describes
  // it, unmeasured (StepComm::add_unmeasured). A hook whose work is several operations is
  // not captured.
  void record_replayed(StepComm& record);
  // After the optimizer step: releases the gradients; the first time, re-plans.
  void after_step();

  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Bytes of the flat tensors the buckets live in (held for the whole run).
  int64_t buffer_bytes() const;
  // The buckets' parameters, in launch order.
  BucketPlan plan() const;

 private:
  void build(const Layout& layout);
  void register_hooks();
  void on_gradient_ready(int64_t index);
  void move_gradients_to_bucket(const Bucket& bucket);
  void launch_ready_buckets();
  // Waits for bucket `b` (the oldest in flight) and lets the hook finish it.
  void complete(size_t b);
  void zero_gaps(const Bucket& bucket);
  void check_unused();

  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::shared_ptr<Communicator> comm_;
  CommHook& hook_;
  ReducerOptions options_;
  Planner replan_;
  bool poll_in_hooks_ = false;  // MPI progresses a collective only inside MPI calls

  std::vector<Bucket> buckets_;
  std::vector<torch::Tensor> shared_;            // with shared_buffers: the buffers
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gaps_;  // per bucket: (offset, numel)
  std::vector<int64_t> pending_;                 // per bucket: gradients still to arrive
  std::vector<std::unique_ptr<Work>> works_;     // per bucket, this step
  std::vector<int64_t> bucket_of_;               // parameter -> bucket
  std::vector<torch::Tensor> views_;             // parameter -> its gradient's place
  std::vector<bool> ready_;                      // parameter's gradient arrived this step
  size_t arrived_ = 0;                           // how many of them
  // When the last gradient arrived, recorded before the launches that follow it: with one
  // hardware queue (CUDA_DEVICE_MAX_CONNECTIONS=1) a record issued after them completes only
  // after them, and the step's exposed communication would read zero.
  std::shared_ptr<const TimePoint> backward_end_;
  size_t next_bucket_ = 0;
  size_t completed_ = 0;                         // buckets waited for and finished this step
  bool reducing_ = false;                        // this backward completes the step
  std::vector<int64_t> observed_order_;
  bool replanned_ = false;
  std::vector<std::pair<std::shared_ptr<torch::autograd::Node>, uintptr_t>> hooks_;
};

}  // namespace dtrain::dist
