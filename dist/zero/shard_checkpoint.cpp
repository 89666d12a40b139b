#include "dist/zero/shard_checkpoint.h"

namespace dtrain::dist {

std::vector<ParamSlice> rank_slices(const PsPlan& plan, int rank) {
  std::vector<ParamSlice> slices;
  for (const PsPiece& piece : plan.pieces) {
    if (plan.chunks[piece.chunk].server != rank) continue;
    slices.push_back({piece.param, piece.param_offset, piece.numel});
  }
  return slices;
}

void save_shard_state(const PsPlan& plan, int rank, const PsShard& shard,
                      const std::string& dir) {
  save_slice_states(rank_slices(plan, rank), shard.state().pieces, dir, rank);
}

void save_shard_index(const PsPlan& plan, int64_t num_params, const std::string& dir) {
  std::vector<std::vector<ParamSlice>> by_rank;
  for (int rank = 0; rank < plan.servers; ++rank) by_rank.push_back(rank_slices(plan, rank));
  save_slice_index(by_rank, num_params, dir);
}

void load_shard_state(const PsPlan& plan, int rank, const std::vector<torch::Tensor>& params,
                      const OptimizerFactory& make_optimizer, const std::string& dir,
                      PsShard& shard) {
  ps::StateMessage message;  // the parameters stay: the model's state is loaded apart
  message.pieces = load_slice_states(dir, params, rank_slices(plan, rank), make_optimizer);
  shard.load_state(message);
}

}  // namespace dtrain::dist
