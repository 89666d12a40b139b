// What ZeRO-3 does around each unit of the model (common/units.h): every unit's trainable
// parameters live in one flat tensor of the plan's padded layout (dist/zero/bucket_shards.h,
// with units for buckets), whose memory exists only while the unit is whole
// (dist/zero/flat_storage.h); this rank keeps its shard of it in the PsShard. Per run of unit u:
//   1. before_forward(u): u is all-gathered from every rank's shard (waiting for its prefetch,
//      if one is in flight); the all-gathers of units u+1 .. u+prefetch start, asynchronous;
//   2. after_forward(u): u's memory is freed; but for the last unit in grad mode, whose
//      backward comes next (FSDP keeps its root unit so too): its second gather is saved;
//   3. before_backward(u): u is gathered again (autograd reads it in u's backward); units
//      u-1 .. u-prefetch start gathering;
//   4. after_backward(u): u's gradients, autograd's full-size ones, are copied into a flat
//      buffer of the unit layout (zeros for parameters without a gradient and for the padding)
//      and reduce-scattered (average) into this rank's shard of the gradients, asynchronously,
//      at most two units at once; the full-size gradients and u's memory are freed, the
//      buffer when its reduce-scatter completes.
// finish_backward() does step 4 for the units whose after_backward did not fire (the first
// unit, whose input is the images; a unit that did not run) and waits for every
// reduce-scatter. Whole units at once: at most prefetch + 1 (the one running and those
// prefetched), which max_whole_units() reports.
//
// Gradient accumulation: each micro-step's gradients are reduce-scattered as above; the first
// micro-step of a step writes this rank's shard, the later ones add to it, so no full-size
// gradient outlives its unit's backward (DeepSpeed's stage 3 does the same). The sum differs
// from DDP's (which averages the ranks' sums of micro-steps) only in rounding.
//
// Gathers in the compute dtype (gather_compute): under autocast, a forward computes in bf16 or
// fp16 whatever the parameters' dtype, so the shards are cast to it and gathered in it, then
// widened into the unit's parameters: half the bytes on the wire, and the weights autocast
// casts again for its matrix products are the same. The dtype is the one the unit's forward
// runs in (autocast's on the parameters' device), kept for its backward's gathers: one step
// sees the same weights in both. The shards themselves, the optimizer's, stay in the
// parameters' dtype, and gather_copy() reads them whole.
//
// Every rank runs the same units in the same order, so the collectives match; all run on the
// thread that runs forward and backward, and are recorded in the step's StepComm.
//
// On GPUs (NCCL) nothing here blocks the host: a collective starts on the NCCL stream after
// the work the compute stream issued before it, and a wait makes the compute stream, not the
// host, wait for it (dist/comm/communicator.h). So the next unit's prefetched gather runs
// beside the running unit's kernels, each unit's kernels wait for its gather on the GPU, and
// the host runs ahead. Memory freed while kernels may still use it (a unit after its
// forward, a gradient buffer after its reduce-scatter) goes back to the caching allocator,
// which reuses it only after them (dist/zero/flat_storage.h); the gradients of a later
// micro-step are added to the shard on the compute stream after their reduce-scatter.
#pragma once

#include "common/units.h"
#include "dist/comm/communicator.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/step_comm.h"

#include <cstdint>
#include <memory>
#include <vector>

namespace dtrain::dist {

class UnitShards : public UnitHooks {
 public:
  // `plan`: bucket u is unit u's trainable parameters (indices into `params`), rank-aligned.
  // `params` (the model's, whole) are moved into per-unit flat tensors, whose memory is then
  // freed: from here on they hold values only while their unit is whole. `shard` holds this
  // rank's shard of every unit, `record` the step's communication; both outlive this.
  UnitShards(const PsPlan& plan, std::vector<torch::Tensor>& params, PsShard& shard,
             std::shared_ptr<Communicator> comm, int64_t prefetch, bool gather_compute,
             StepComm& record);
  ~UnitShards() override;
  UnitShards(const UnitShards&) = delete;
  UnitShards& operator=(const UnitShards&) = delete;

  void before_forward(int64_t unit) override;
  void after_forward(int64_t unit) override;
  void before_backward(int64_t unit) override;
  void after_backward(int64_t unit) override;

  // The next backward's gradients are the first of a step: they overwrite the shard's. Frees
  // a last unit kept for a backward that never came.
  void start_step();
  // Frees every whole unit (waiting for its gather, if one is in flight).
  void release_all();
  // After a micro-step's backward: reduce-scatters the units not yet reduce-scattered, in
  // reverse unit order, waits for every reduce-scatter (on NCCL: the current stream waits) and
  // frees every whole unit. The shard's gradients are then ready for the optimizer.
  void finish_backward();

  // Unit `unit`'s parameters all-gathered into a new tensor of its padded layout (not the
  // unit's own memory). Collective; blocking on MPI, ready for the current stream's next work
  // on NCCL; not while a step is in flight.
  torch::Tensor gather_copy(int64_t unit) const;

  int64_t max_whole_units() const { return max_whole_; }
  int64_t whole_units() const { return whole_; }

 private:
  enum class State { kReleased, kGathering, kWhole };
  struct Pending {  // a unit's reduce-scatter in flight
    std::unique_ptr<Work> work;
    torch::Tensor flat;         // [padded unit numel], its input
    torch::Tensor partner;      // accumulating: [shard numel], its output
    int64_t add_to_chunk = -1;  // accumulating: the chunk the partner is added to
  };

  bool has_params(int64_t unit) const { return !plan_.layout[unit].params.empty(); }
  int64_t my_chunk(int64_t unit) const;
  // Starts unit's all-gather into its newly allocated memory, if it is released.
  void gather(int64_t unit);
  // Unit's parameters hold their values on return.
  void make_whole(int64_t unit);
  void release(int64_t unit);
  void reduce_gradients(int64_t unit);
  void complete(Pending& pending);
  // gather_compute: the dtype the forward runs in from here on; else the parameters'.
  void choose_gather_dtype();
  // MPI moves a nonblocking collective forward only inside MPI calls: a test() in each hook.
  void poll();

  const PsPlan& plan_;
  std::vector<torch::Tensor>& params_;
  PsShard& shard_;
  std::shared_ptr<Communicator> comm_;
  int64_t prefetch_ = 1;
  StepComm& record_;
  int64_t units_ = 0;

  std::vector<torch::Tensor> flat_;  // per unit: [padded numel], the parameters as views
  bool gather_compute_ = false;
  torch::ScalarType gather_dtype_;  // what the last forward computed in (gather_compute)
  // Per unit, while kGathering in another dtype than the parameters': the shard cast, and the
  // whole unit in that dtype, widened into flat_ once gathered.
  std::vector<torch::Tensor> cast_shard_, cast_flat_;
  std::vector<State> state_;
  std::vector<std::unique_ptr<Work>> gathers_;  // per unit, while kGathering
  int64_t whole_ = 0;                           // units not kReleased
  int64_t max_whole_ = 0;

  std::vector<Pending> pending_;  // two slots, used in turn
  size_t next_pending_ = 0;
  std::vector<bool> reduced_;  // per unit: reduce-scattered in this micro-step
  bool accumulate_ = false;
};

}  // namespace dtrain::dist
