#include "dist/ps/whole_state.h"

#include "common/error.h"
#include "common/files.h"
#include "common/host_wait.h"
#include "dist/comm/gather.h"
#include "dist/optimizer_state.h"
#include "dist/ps/piece_state.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace dtrain::dist {

namespace {

std::vector<int64_t> piece_shape(const torch::Tensor& param, int64_t numel) {
  return param.dim() <= 1 ? std::vector<int64_t>{numel} : std::vector<int64_t>{numel, 1};
}

}  // namespace

std::vector<ps::StateMessage> gather_states_on_rank0(Communicator& comm,
                                                     const ps::StateMessage& mine) {
  const torch::Tensor encoded = ps::encode(mine);
  const std::vector<std::string> all = all_gather_bytes(
      comm, std::string(static_cast<const char*>(encoded.data_ptr()),
                        static_cast<size_t>(encoded.numel())));
  std::vector<ps::StateMessage> states;
  if (comm.rank() != 0) return states;
  for (const std::string& bytes : all) states.push_back(ps::decode(bytes_tensor(bytes), {}));
  return states;
}

ps::StateMessage server_state(const PsPlan& plan, int server,
                              const std::vector<torch::Tensor>& params,
                              const torch::optim::Optimizer* whole) {
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& param : params) {
    flat.push_back(to_host(to_memory_order(param.detach(), param)));
  }
  ps::StateMessage message;
  int64_t numel = 0;
  for (const int64_t c : plan.chunks_of(server)) numel += plan.chunks[c].numel;
  message.params = torch::empty({numel}, flat.front().options());
  int64_t chunk_start = 0, last_chunk = -1;
  for (const PsPiece& piece : plan.pieces) {
    if (plan.chunks[piece.chunk].server != server) continue;
    if (piece.chunk != last_chunk) {
      if (last_chunk >= 0) chunk_start += plan.chunks[last_chunk].numel;
      last_chunk = piece.chunk;
    }
    message.params.narrow(0, chunk_start + piece.chunk_offset, piece.numel)
        .copy_(flat[piece.param].narrow(0, piece.param_offset, piece.numel));
    const torch::Tensor& param = params[piece.param];
    const torch::optim::OptimizerParamState* state = whole ? find_state(*whole, param) : nullptr;
    message.pieces.push_back(
        state ? fields_to_bytes(slice_fields(state_fields(*state), param, piece.param_offset,
                                             piece.numel, piece_shape(param, piece.numel)))
              : std::string());
  }
  return message;
}

std::unique_ptr<torch::optim::Optimizer> whole_optimizer(
    const PsPlan& plan, const std::vector<torch::Tensor>& params,
    const OptimizerFactory& make_optimizer, const std::vector<ps::StateMessage>& servers) {
  std::vector<std::vector<std::pair<int64_t, StateFields>>> pieces_of(params.size());
  for (size_t s = 0; s < servers.size(); ++s) {
    const ps::StateMessage& message = servers[s];
    size_t i = 0;
    for (const PsPiece& piece : plan.pieces) {
      if (plan.chunks[piece.chunk].server != static_cast<int>(s)) continue;
      DTRAIN_CHECK(i < message.pieces.size(), "ps: server {} sent the state of {} pieces", s,
                   message.pieces.size());
      if (!message.pieces[i].empty()) {
        pieces_of[piece.param].emplace_back(
            piece.param_offset, fields_from_bytes(message.pieces[i], params[piece.param].device()));
      }
      ++i;
    }
  }
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer(params);
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> states =
      prototype_states(make_optimizer, params);
  for (size_t p = 0; p < params.size(); ++p) {
    if (pieces_of[p].empty() || !states[p]) continue;
    std::sort(pieces_of[p].begin(), pieces_of[p].end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<StateFields> fields;
    std::vector<int64_t> offsets;
    for (auto& [offset, piece] : pieces_of[p]) {
      offsets.push_back(offset);
      fields.push_back(std::move(piece));
    }
    set_state_fields(*states[p], join_fields(fields, offsets, params[p]));
    put_state(*whole, params[p], std::move(states[p]));
  }
  return whole;
}

void save_whole_state(const std::string& dir, const PsPlan& plan,
                      const std::vector<torch::Tensor>& params,
                      const std::vector<std::string>& names, const OptimizerFactory& make_optimizer,
                      const std::vector<ps::StateMessage>& gathered) {
  DTRAIN_CHECK(static_cast<int>(gathered.size()) == plan.servers,
               "ps: save() without prepare_checkpoint() on every rank");
  save_optimizer(*whole_optimizer(plan, params, make_optimizer, gathered), dir);
  write_whole_file(dir + "/ps_plan.txt",
                   plan.describe(names, static_cast<int64_t>(params.front().element_size())));
}

void load_whole_state(const std::string& dir, const PsPlan& plan, int server,
                      const std::vector<torch::Tensor>& params,
                      const OptimizerFactory& make_optimizer, PsShard& shard) {
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer(params);
  load_optimizer_state(dir, params, 0, static_cast<int64_t>(params.size()), make_optimizer,
                       *whole);
  shard.load_state(server_state(plan, server, params, whole.get()));
  shard.set_params(params);
}

}  // namespace dtrain::dist
