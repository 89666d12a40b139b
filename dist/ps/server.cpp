#include "dist/ps/server.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/ps/piece_state.h"
#include "dist/ps/protocol.h"
#include "dist/ps/state_message.h"
#include "optim/optimizer.h"
#include "optim/state_bytes.h"

#include <fmt/format.h>

#include <algorithm>
#include <thread>
#include <unordered_map>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

PsServer::PsServer(PsServerSetup setup, const std::vector<torch::Tensor>& params,
                   std::vector<std::string> names, const OptimizerFactory& make_optimizer)
    : s_(std::move(setup)), names_(std::move(names)), make_optimizer_(make_optimizer),
      last_arrival_(Clock::now()) {
  const PsPlan& plan = *s_.plan;
  chunk_ids_ = plan.chunks_of(s_.index);
  local_offset_.assign(plan.chunks.size(), -1);
  int64_t numel = 0;
  for (const int64_t c : chunk_ids_) {
    local_offset_[c] = numel;
    numel += plan.chunks[c].numel;
  }
  const auto options = torch::TensorOptions().dtype(params.front().scalar_type());
  params_ = torch::zeros({numel}, options);
  grads_ = torch::zeros({numel}, options);
  for (const torch::Tensor& param : params) {
    param_numel_.push_back(param.numel());
    model_params_.push_back(param);
  }
  std::vector<torch::Tensor> flat_params;
  for (const torch::Tensor& param : params) flat_params.push_back(to_memory_order(param.detach(), param).cpu());
  for (const PsPiece& piece : plan.pieces) {
    if (local_offset_[piece.chunk] < 0) continue;
    const int64_t at = local_offset_[piece.chunk] + piece.chunk_offset;
    params_.narrow(0, at, piece.numel)
        .copy_(flat_params[piece.param].narrow(0, piece.param_offset, piece.numel));
    // The piece keeps its tensor's rank class, so the optimizer's groups (weight decay for
    // matrices only, trust ratios) are the whole tensor's.
    const bool vector_like = params[piece.param].dim() <= 1;
    const std::vector<int64_t> shape =
        vector_like ? std::vector<int64_t>{piece.numel} : std::vector<int64_t>{piece.numel, 1};
    torch::Tensor view = params_.narrow(0, at, piece.numel).view(shape);
    view.mutable_grad() = grads_.narrow(0, at, piece.numel).view(shape);
    pieces_.push_back(view);
    piece_param_.push_back(piece.param);
    piece_offset_.push_back(piece.param_offset);
  }
  optimizer_ = make_optimizer_(pieces_);
  install_norm_reducers();

  const size_t workers = s_.worker_ranks.size();
  pushed_.assign(workers, std::vector<std::deque<torch::Tensor>>(chunk_ids_.size()));
  free_buffers_.assign(chunk_ids_.size(), {});
  step_lr_.assign(workers, {});
  worker_done_.assign(workers, false);
}

PsServer::~PsServer() = default;

void PsServer::install_norm_reducers() {
  // Per tensor: the pieces' squared norms summed here, then over the servers (bsp, ssp). The
  // reducer is called once per step and group on every server, also with no pieces.
  std::unordered_map<const void*, int64_t> param_of;
  for (size_t i = 0; i < pieces_.size(); ++i) {
    param_of[pieces_[i].unsafeGetTensorImpl()] = piece_param_[i];
  }
  const int64_t tensors = static_cast<int64_t>(param_numel_.size());
  optim::set_norm_reducer(
      *optimizer_, [this, param_of, tensors](const std::vector<torch::Tensor>& pieces,
                                             const torch::Tensor& sq_norms) {
        std::vector<int64_t> index;
        for (const torch::Tensor& piece : pieces) {
          index.push_back(param_of.at(piece.unsafeGetTensorImpl()));
        }
        const torch::Tensor where = torch::tensor(index, torch::kInt64);
        torch::Tensor per_tensor = torch::zeros({2, tensors}, torch::kFloat64);
        if (!index.empty()) per_tensor.index_add_(1, where, sq_norms.to(torch::kFloat64));
        per_tensor = reduce_over_servers(per_tensor);
        return per_tensor.index_select(1, where).to(sq_norms.options());
      });
  optim::set_grad_norm_reducer(*optimizer_, [this](const torch::Tensor& sq_norm) {
    if (s_.consistency == Consistency::kAsync) {
      throw UserError("optim.max_grad_norm (LAMB's global gradient clipping) is not available "
                      "with dist.ps.consistency = \"async\": the servers apply pushes "
                      "independently; set it to 0 or use \"bsp\" or \"ssp\"");
    }
    return reduce_over_servers(sq_norm.to(torch::kFloat64)).to(sq_norm.options());
  });
}

torch::Tensor PsServer::reduce_over_servers(torch::Tensor values) const {
  if (s_.consistency == Consistency::kAsync || s_.servers->size() == 1) return values;
  values = values.contiguous();
  s_.servers->all_reduce(values, ReduceOp::kSum)->wait();
  return values;
}

size_t PsServer::worker_of(int rank) const {
  for (size_t w = 0; w < s_.worker_ranks.size(); ++w) {
    if (s_.worker_ranks[w] == rank) return w;
  }
  DTRAIN_CHECK(false, "ps server {}: a message from rank {}, which is no worker", s_.index, rank);
  return 0;
}

torch::Tensor PsServer::buffer_for(int64_t local) {
  std::vector<torch::Tensor>& free = free_buffers_[local];
  if (free.empty()) return torch::empty({s_.plan->chunks[chunk_ids_[local]].numel},
                                        params_.options());
  torch::Tensor buffer = std::move(free.back());
  free.pop_back();
  return buffer;
}

void PsServer::take_arrivals() {
  while (std::optional<Envelope> envelope = s_.requests->iprobe(kAnySource, kAnyTag)) {
    last_arrival_ = Clock::now();
    const size_t worker = worker_of(envelope->source);
    if (envelope->tag == ps::kControlTag) {
      torch::Tensor message = torch::empty({3}, torch::kFloat64);
      s_.requests->recv_probed(*envelope, message)->wait();
      handle_control(worker, message);
      continue;
    }
    DTRAIN_CHECK(envelope->tag >= 2 && envelope->tag % 2 == 0,
                 "ps server {}: unexpected tag {} from rank {}", s_.index, envelope->tag,
                 envelope->source);
    const int64_t chunk = (envelope->tag - 2) / 2;
    const int64_t local =
        std::find(chunk_ids_.begin(), chunk_ids_.end(), chunk) - chunk_ids_.begin();
    DTRAIN_CHECK(local < static_cast<int64_t>(chunk_ids_.size()),
                 "ps server {}: a push of chunk {}, which another server holds", s_.index, chunk);
    torch::Tensor buffer = buffer_for(local);
    receiving_.push_back({worker, local, s_.requests->recv_probed(*envelope, buffer), buffer});
  }
  // Completed in order per worker and chunk: their queues keep the order of the steps.
  for (size_t i = 0; i < receiving_.size();) {
    Incoming& in = receiving_[i];
    bool earlier_pending = false;
    for (size_t j = 0; j < i && !earlier_pending; ++j) {
      earlier_pending = receiving_[j].worker == in.worker && receiving_[j].local == in.local;
    }
    if (earlier_pending || !in.work->test()) {
      ++i;
      continue;
    }
    pushed_[in.worker][in.local].push_back(std::move(in.buffer));
    receiving_.erase(receiving_.begin() + static_cast<int64_t>(i));
  }
}

void PsServer::handle_control(size_t worker, const torch::Tensor& message) {
  const ps::Control control = ps::Control::decode(message);
  switch (control.command) {
    case ps::Command::kStep: step_lr_[worker].push_back(control.value); break;
    case ps::Command::kPull: send_chunks({worker}); break;
    case ps::Command::kSendState: send_state(worker); break;
    case ps::Command::kLoadState: load_state(worker); break;
    case ps::Command::kDone: worker_done_[worker] = true; break;
    default:
      DTRAIN_CHECK(false, "ps server {}: unknown command {} from worker {}", s_.index,
                   static_cast<int64_t>(control.command), worker);
  }
}

bool PsServer::push_complete(size_t worker) const {
  if (step_lr_[worker].empty()) return false;
  for (const auto& queue : pushed_[worker]) {
    if (queue.empty()) return false;
  }
  return true;
}

void PsServer::poll() {
  take_arrivals();
  const size_t workers = s_.worker_ranks.size();
  if (s_.consistency == Consistency::kAsync) {
    // Round robin from the worker after the last one served: no worker starves.
    for (size_t k = 0; k < workers; ++k) {
      const size_t worker = (next_async_ + k) % workers;
      if (!push_complete(worker)) continue;
      apply_push(worker);
      next_async_ = worker + 1;
    }
  } else {
    for (;;) {
      bool all = true;
      for (size_t w = 0; w < workers && all; ++w) all = push_complete(w);
      if (!all) break;
      apply_round();
    }
  }
  sending_.erase(std::remove_if(sending_.begin(), sending_.end(),
                                [](Outgoing& out) { return out.work->test(); }),
                 sending_.end());
}

void PsServer::apply_round() {
  const size_t workers = s_.worker_ranks.size();
  // Summed in worker order: the same bits whatever the arrival order.
  for (size_t local = 0; local < chunk_ids_.size(); ++local) {
    torch::Tensor sum = grads_.narrow(0, local_offset_[chunk_ids_[local]],
                                      s_.plan->chunks[chunk_ids_[local]].numel);
    for (size_t w = 0; w < workers; ++w) {
      torch::Tensor push = std::move(pushed_[w][local].front());
      pushed_[w][local].pop_front();
      if (w == 0) {
        sum.copy_(push);
      } else {
        sum.add_(push);
      }
      free_buffers_[local].push_back(std::move(push));
    }
  }
  grads_.div_(static_cast<double>(workers));
  const double lr = step_lr_[0].front();
  for (auto& queue : step_lr_) queue.pop_front();
  step_optimizer(lr);
  std::vector<size_t> all(workers);
  for (size_t w = 0; w < workers; ++w) all[w] = w;
  send_chunks(all);
}

void PsServer::apply_push(size_t worker) {
  for (size_t local = 0; local < chunk_ids_.size(); ++local) {
    torch::Tensor push = std::move(pushed_[worker][local].front());
    pushed_[worker][local].pop_front();
    grads_.narrow(0, local_offset_[chunk_ids_[local]], push.numel()).copy_(push);
    free_buffers_[local].push_back(std::move(push));
  }
  // One push is one worker's share of a step: W of them make one step at lr.
  const double lr = step_lr_[worker].front() / static_cast<double>(s_.worker_ranks.size());
  step_lr_[worker].pop_front();
  step_optimizer(lr);
  send_chunks({worker});
}

void PsServer::step_optimizer(double lr) {
  torch::NoGradGuard no_grad;
  optim::set_lr(*optimizer_, lr);
  optimizer_->step();
  ++version_;
}

void PsServer::send_chunks(const std::vector<size_t>& workers) {
  const int64_t header = ps::header_numel(params_.scalar_type());
  for (size_t local = 0; local < chunk_ids_.size(); ++local) {
    const int64_t chunk = chunk_ids_[local];
    const int64_t numel = s_.plan->chunks[chunk].numel;
    torch::Tensor message = torch::empty({header + numel}, params_.options());
    ps::write_version(message, version_);
    message.narrow(0, header, numel).copy_(params_.narrow(0, local_offset_[chunk], numel));
    for (const size_t w : workers) {
      sending_.push_back(
          {s_.replies->send(message, s_.worker_ranks[w], ps::params_tag(chunk)), message});
    }
  }
}

void PsServer::send_state(size_t worker) {
  ps::StateMessage message;
  for (const torch::Tensor& piece : pieces_) {
    const torch::optim::OptimizerParamState* state = find_state(*optimizer_, piece);
    message.pieces.push_back(state ? fields_to_bytes(state_fields(*state)) : std::string());
  }
  torch::Tensor bytes = ps::encode(message);
  sending_.push_back({s_.replies->send(bytes, s_.worker_ranks[worker], ps::kStateTag), bytes});
}

void PsServer::load_state(size_t worker) {
  const Envelope envelope = s_.requests->probe(s_.worker_ranks[worker], ps::kStateTag);
  torch::Tensor bytes = torch::empty({envelope.bytes}, torch::kUInt8);
  s_.requests->recv_probed(envelope, bytes)->wait();
  const ps::StateMessage message = ps::decode(bytes, params_);
  DTRAIN_CHECK(message.pieces.size() == pieces_.size(),
               "ps server {}: state of {} pieces for {} held here", s_.index,
               message.pieces.size(), pieces_.size());
  std::vector<std::unique_ptr<torch::optim::OptimizerParamState>> prototypes =
      prototype_states(make_optimizer_, pieces_);
  for (size_t i = 0; i < pieces_.size(); ++i) {
    if (message.pieces[i].empty() || !prototypes[i]) continue;
    set_state_fields(*prototypes[i], fields_from_bytes(message.pieces[i], torch::kCPU));
    put_state(*optimizer_, pieces_[i], std::move(prototypes[i]));
  }
  torch::Tensor ack = torch::zeros({1}, torch::kInt64);
  sending_.push_back({s_.replies->send(ack, s_.worker_ranks[worker], ps::kStateTag), ack});
}

bool PsServer::owed() const {
  if (!sending_.empty() || !receiving_.empty()) return true;
  for (size_t w = 0; w < pushed_.size(); ++w) {
    if (!step_lr_[w].empty()) return true;
    for (const auto& queue : pushed_[w]) {
      if (!queue.empty()) return true;
    }
  }
  return false;
}

void PsServer::serve() {
  while (!finished()) {
    poll();
    // Idle with nothing half done is no failure: the workers may be evaluating, for long.
    if (!owed()) last_arrival_ = Clock::now();
    const double waited_s = std::chrono::duration<double>(Clock::now() - last_arrival_).count();
    if (waited_s > s_.timeout_s) {
      std::string missing;
      for (size_t w = 0; w < worker_done_.size(); ++w) {
        if (worker_done_[w] || !step_lr_[w].empty()) continue;
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", s_.worker_ranks[w]);
      }
      log::error("rank {}: ps server {} waited {:.0f} s (dist.timeout_s) for the rest of a step; "
                 "no complete push from worker rank(s) {}; ending the job",
                 error_rank(), s_.index, waited_s, missing.empty() ? "none" : missing);
      abort_world(3);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool PsServer::finished() const {
  for (const bool done : worker_done_) {
    if (!done) return false;
  }
  return sending_.empty() && receiving_.empty();
}

double PsServer::optimizer_state_mb() const {
  return static_cast<double>(optim::state_bytes(*optimizer_)) / (1 << 20);
}

}  // namespace dtrain::dist
