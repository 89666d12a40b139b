#include "dist/ps/shard.h"

#include "common/error.h"
#include "dist/ps/piece_state.h"
#include "optim/multi_tensor.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

#include <unordered_map>

namespace dtrain::dist {

PsShard::ServerSum PsShard::sum_over(std::shared_ptr<Communicator> comm) {
  return [comm = std::move(comm)](torch::Tensor values) {
    if (comm->size() == 1) return values;
    values = values.contiguous();
    comm->all_reduce(values, ReduceOp::kSum)->wait();
    return values;
  };
}

PsShard::PsShard(const PsPlan& plan, int index, const std::vector<torch::Tensor>& params,
                 torch::Device device, const OptimizerFactory& make_optimizer,
                 ServerSum sum_over_servers, bool whole_tensors)
    : plan_(plan), index_(index), sum_over_servers_(std::move(sum_over_servers)),
      whole_tensors_(whole_tensors), make_optimizer_(make_optimizer),
      tensors_(static_cast<int64_t>(params.size())) {
  chunk_ids_ = plan.chunks_of(index);
  local_offset_.assign(plan.chunks.size(), -1);
  int64_t numel = 0;
  for (const int64_t c : chunk_ids_) {
    local_offset_[c] = numel;
    numel += plan.chunks[c].numel;
  }
  const auto options = torch::TensorOptions().dtype(params.front().scalar_type()).device(device);
  params_ = torch::zeros({numel}, options);
  grads_ = torch::zeros({numel}, options);
  for (const PsPiece& piece : plan.pieces) {
    if (local_offset_[piece.chunk] < 0) continue;
    const int64_t at = local_offset_[piece.chunk] + piece.chunk_offset;
    const bool vector_like = params[piece.param].dim() <= 1;
    const std::vector<int64_t> shape =
        vector_like ? std::vector<int64_t>{piece.numel} : std::vector<int64_t>{piece.numel, 1};
    pieces_.push_back(params_.narrow(0, at, piece.numel).view(shape));
    piece_of_.push_back(&piece);
    piece_at_.push_back(at);
  }
  bind_grads();
  set_params(params);
  optimizer_ = make_optimizer_(pieces_);
  install_norm_reducers();
}

PsShard::~PsShard() = default;

torch::Tensor PsShard::chunk_params(int64_t chunk) const { return chunk_of(params_, chunk); }

torch::Tensor PsShard::chunk_of(const torch::Tensor& flat, int64_t chunk) const {
  DTRAIN_CHECK(local_offset_.at(chunk) >= 0, "ps server {}: chunk {} is held elsewhere", index_,
               chunk);
  return flat.narrow(0, local_offset_[chunk], plan_.chunks[chunk].numel);
}

torch::Tensor PsShard::chunk_grads(int64_t chunk) const {
  DTRAIN_CHECK(local_offset_.at(chunk) >= 0, "ps server {}: chunk {} is held elsewhere", index_,
               chunk);
  return grads_.narrow(0, local_offset_[chunk], plan_.chunks[chunk].numel);
}

void PsShard::bind_grads() {
  for (size_t i = 0; i < pieces_.size(); ++i) {
    pieces_[i].mutable_grad() =
        grads_.narrow(0, piece_at_[i], pieces_[i].numel()).view(pieces_[i].sizes());
  }
}

void PsShard::set_params(const std::vector<torch::Tensor>& params) {
  torch::NoGradGuard no_grad;
  std::unordered_map<int64_t, torch::Tensor> flat;  // memory order, on the shard's device
  for (size_t i = 0; i < pieces_.size(); ++i) {
    const PsPiece& piece = *piece_of_[i];
    auto found = flat.find(piece.param);
    if (found == flat.end()) {
      const torch::Tensor& param = params[piece.param];
      found = flat.emplace(piece.param,
                           to_memory_order(param.detach(), param).to(params_.device())).first;
    }
    pieces_[i].view({-1}).copy_(found->second.narrow(0, piece.param_offset, piece.numel));
  }
}

void PsShard::install_norm_reducers() {
  // Per tensor: the pieces' squared norms summed here, then over the servers. The reducer is
  // called once per step and group on every server, also with no pieces.
  std::unordered_map<const void*, int64_t> param_of;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    param_of[pieces_[i].unsafeGetTensorImpl()] = piece_of_[i]->param;
  }
  optim::set_norm_reducer(
      *optimizer_, [this, param_of](const std::vector<torch::Tensor>& pieces,
                                    const torch::Tensor& sq_norms) {
        const std::pair<const void*, size_t> key(
            pieces.empty() ? nullptr : pieces.front().unsafeGetTensorImpl(), pieces.size());
        auto found = tensor_index_.find(key);
        if (found == tensor_index_.end()) {
          std::vector<int64_t> index;
          for (const torch::Tensor& piece : pieces) {
            index.push_back(param_of.at(piece.unsafeGetTensorImpl()));
          }
          found = tensor_index_
                      .emplace(key, torch::tensor(index, torch::kInt64).to(params_.device()))
                      .first;
        }
        const torch::Tensor& where = found->second;
        torch::Tensor per_tensor =
            torch::zeros({2, tensors_}, params_.options().dtype(torch::kFloat64));
        if (where.numel() > 0) per_tensor.index_add_(1, where, sq_norms.to(torch::kFloat64));
        if (!whole_tensors_) per_tensor = sum_over_servers_(per_tensor);
        return per_tensor.index_select(1, where).to(sq_norms.options());
      });
  optim::set_grad_norm_reducer(*optimizer_, [this](const torch::Tensor& sq_norm) {
    if (whole_tensors_) {
      throw UserError("optim.max_grad_norm (LAMB's global gradient clipping) is not available "
                      "with dist.ps.consistency = \"async\": the servers apply pushes "
                      "independently; set it to 0 or use \"bsp\" or \"ssp\"");
    }
    // A shard without pieces gets a host zero from LAMB: the sum runs on the shard's device.
    return sum_over_servers_(sq_norm.to(params_.device(), torch::kFloat64))
        .to(sq_norm.options());
  });
}

void PsShard::step(double lr) {
  torch::NoGradGuard no_grad;
  optim::set_lr(*optimizer_, lr);
  optimizer_->step();
  ++version_;
}

torch::Tensor PsShard::preview(double lr) const {
  torch::NoGradGuard no_grad;
  DTRAIN_CHECK(dynamic_cast<const torch::optim::SGD*>(optimizer_.get()) != nullptr,
               "ps server {}: a round in progress is previewed with SGD's update only", index_);
  // torch::optim::SGD's arithmetic, written to a new tensor: d = g + wd p; with momentum m,
  // b = m b + (1 - dampening) d (b = d at the first step), d = nesterov ? d + m b : b;
  // p - lr d. Over the whole shard at once, each element's weight decay its group's: a
  // preview is on the path from the pushes to every worker's read, where a launch per piece
  // and operation cost 2-6 ms of host time on a ResNet-50's shards (2 x H200).
  const auto& options =
      static_cast<const torch::optim::SGDOptions&>(optimizer_->param_groups().front().options());
  if (!decay_.defined()) {  // the first preview: the groups' options are fixed from then on
    decay_ = torch::zeros_like(params_);
    for (const torch::optim::OptimizerParamGroup& group : optimizer_->param_groups()) {
      const auto& other = static_cast<const torch::optim::SGDOptions&>(group.options());
      DTRAIN_CHECK(other.momentum() == options.momentum() &&
                       other.dampening() == options.dampening() &&
                       other.nesterov() == options.nesterov(),
                   "ps server {}: SGD's groups differ in more than weight decay", index_);
      const double decay = other.weight_decay();
      if (decay == 0.0) continue;
      decays_ = true;
      for (const torch::Tensor& piece : group.params()) {
        decay_.narrow(0, piece.storage_offset() - params_.storage_offset(), piece.numel())
            .fill_(decay);
      }
    }
  }
  const torch::Tensor d = decays_ ? grads_.addcmul(decay_, params_) : grads_;
  torch::Tensor step = d;
  if (options.momentum() != 0.0) {
    const torch::Tensor buffer =
        gather_momentum() ? momentum_.mul_(options.momentum()).add_(d, 1 - options.dampening())
                          : d;
    step = options.nesterov() ? d.add(buffer, options.momentum()) : buffer;
  }
  return params_.sub(step, lr);
}

bool PsShard::gather_momentum() const {
  if (!momentum_.defined()) {
    // The optimizer makes every piece's buffer at its first step (each piece has a gradient),
    // a resume replaces them; after that it updates them in place.
    momentum_buffers_.clear();
    for (const torch::Tensor& piece : pieces_) {
      const auto* state =
          static_cast<const torch::optim::SGDParamState*>(find_state(*optimizer_, piece));
      if (state == nullptr) break;
      momentum_buffers_.push_back(state->momentum_buffer());
    }
    if (momentum_buffers_.size() != pieces_.size()) {
      DTRAIN_CHECK(momentum_buffers_.empty(),
                   "ps server {}: {} of {} pieces have momentum buffers", index_,
                   momentum_buffers_.size(), pieces_.size());
      return false;
    }
    momentum_ = torch::empty_like(params_);
    momentum_views_.clear();
    for (size_t i = 0; i < pieces_.size(); ++i) {
      momentum_views_.push_back(
          momentum_.narrow(0, piece_at_[i], pieces_[i].numel()).view(pieces_[i].sizes()));
    }
  }
  if (!momentum_views_.empty()) optim::copy_(momentum_views_, momentum_buffers_);
  return true;
}

ps::StateMessage PsShard::state() const {
  ps::StateMessage message;
  for (const torch::Tensor& piece : pieces_) {
    const torch::optim::OptimizerParamState* state = find_state(*optimizer_, piece);
    message.pieces.push_back(state ? fields_to_bytes(state_fields(*state)) : std::string());
  }
  return message;
}

void PsShard::load_state(const ps::StateMessage& message) {
  momentum_ = torch::Tensor();  // the buffers are replaced below
  DTRAIN_CHECK(message.pieces.size() == pieces_.size(),
               "ps server {}: state of {} pieces for {} held here", index_,
               message.pieces.size(), pieces_.size());
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> prototypes =
      prototype_states(make_optimizer_, pieces_);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (message.pieces[i].empty() || !prototypes[i]) continue;
    set_state_fields(*prototypes[i], fields_from_bytes(message.pieces[i], params_.device()));
    put_state(*optimizer_, pieces_[i], std::move(prototypes[i]));
  }
}

double PsShard::optimizer_state_mb() const {
  return static_cast<double>(optim::state_bytes(*optimizer_)) / (1 << 20);
}

}  // namespace dtrain::dist
