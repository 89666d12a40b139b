// What one server holds: the master copy of the chunks the plan places on it (back to back,
// in the model's dtype, on the server's device), the gradients being applied to them, and an
// optimizer over their pieces. Each piece keeps its tensor's rank class ([n] for 1-D
// parameters, [n, 1] otherwise), so any optimizer in optim/ groups it as it would group the
// whole tensor (weight decay for matrices only, trust ratios); LARS's and LAMB's norms and
// LAMB's clipping norm are those of the whole tensors, their partial sums added over the
// servers by `sum_over_servers`.
//
// The transports (dist/ps/server.h: MPI messages; dist/ps/collective.h: collectives) decide
// how gradients reach grads() and how params() reach the workers; the shard only steps.
#pragma once

#include "dist/ps/plan.h"
#include "dist/ps/state_message.h"
#include "dist/strategy.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace dtrain::dist {

class PsShard {
 public:
  // Sums a tensor on the shard's device over every server holding pieces of the same tensors.
  using ServerSum = std::function<torch::Tensor(torch::Tensor)>;
  // The sum over the ranks of `comm` (blocking), which are the servers.
  static ServerSum sum_over(std::shared_ptr<Communicator> comm);

  // `params`: the model's trainable parameters, whose values the chunks start from. With
  // `whole_tensors` (async: every tensor on one server) no sum is needed, and LAMB's global
  // clipping, which would need every server at once, is refused.
  PsShard(const PsPlan& plan, int index, const std::vector<torch::Tensor>& params,
          torch::Device device, const OptimizerFactory& make_optimizer,
          ServerSum sum_over_servers, bool whole_tensors);
  ~PsShard();
  PsShard(const PsShard&) = delete;
  PsShard& operator=(const PsShard&) = delete;

  // The chunks held here, ascending; their elements back to back.
  const std::vector<int64_t>& chunk_ids() const { return chunk_ids_; }
  torch::Tensor params() const { return params_; }
  torch::Tensor grads() const { return grads_; }
  // Chunk `chunk` (held here) within params() and grads().
  torch::Tensor chunk_params(int64_t chunk) const;
  torch::Tensor chunk_grads(int64_t chunk) const;
  // Chunk `chunk` (held here) within `flat`, a tensor laid out as params().
  torch::Tensor chunk_of(const torch::Tensor& flat, int64_t chunk) const;

  // The pieces the optimizer steps (views of params()), each in its tensor's rank class.
  const std::vector<torch::Tensor>& pieces() const { return pieces_; }
  // Points each piece's gradient at its place in grads() again (after someone released them:
  // a skipped step).
  void bind_grads();

  // One optimizer step at `lr` with the gradients in grads().
  void step(double lr);
  // What step(lr) would make of params() (a new tensor, chunks back to back), which it leaves
  // as they are, and the optimizer's state too: a round in progress, for ssp_reads =
  // "partial". SGD only (DTRAIN_CHECK): its update needs nothing beyond the momentum buffers.
  torch::Tensor preview(double lr) const;
  int64_t version() const { return version_; }

  // The pieces' values from the model's parameters (after a resume loaded them).
  void set_params(const std::vector<torch::Tensor>& params);
  // The pieces' optimizer state, in plan order (dist/ps/state_message.h), and back.
  ps::StateMessage state() const;
  void load_state(const ps::StateMessage& message);
  double optimizer_state_mb() const;
  int64_t numel() const { return params_.numel(); }

 private:
  void install_norm_reducers();
  // preview(): the optimizer's momentum buffers into momentum_, laid out as params_ (made,
  // with the list of buffers, at the first call that finds them); false where there are none
  // yet.
  bool gather_momentum() const;

  const PsPlan& plan_;
  int index_ = 0;
  ServerSum sum_over_servers_;
  bool whole_tensors_ = false;
  OptimizerFactory make_optimizer_;
  std::vector<int64_t> chunk_ids_;
  std::vector<int64_t> local_offset_;  // per chunk of the plan: offset in params_, or -1
  torch::Tensor params_;               // [numel], the chunks back to back
  torch::Tensor grads_;                // [numel]
  std::vector<torch::Tensor> pieces_;  // views of params_, gradients views of grads_
  std::vector<const PsPiece*> piece_of_;  // the plan's piece of each
  std::vector<int64_t> piece_at_;         // each piece's offset in params_ and grads_
  int64_t tensors_ = 0;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  // Per group of pieces the optimizer reduces norms over: their tensors' indices on the
  // shard's device (made once: a host-to-device copy per step would wait for the device).
  std::map<std::pair<const void*, size_t>, torch::Tensor> tensor_index_;
  int64_t version_ = 0;
  // preview()'s scratch, made at its first call: each element's weight decay (whether any is
  // not zero), the momentum buffers gathered, and the buffers with their places there.
  mutable torch::Tensor decay_;
  mutable bool decays_ = false;
  mutable torch::Tensor momentum_;
  mutable std::vector<torch::Tensor> momentum_buffers_, momentum_views_;
};

}  // namespace dtrain::dist
