// The parameter server's part in checkpoints. The servers hold the optimizer state in pieces of
// chunks; rank 0 gathers them into whole tensors' states to save (the format every strategy
// reads), and on resume cuts the loaded state into the current plan's pieces, so a checkpoint
// restores into any number of servers and from any strategy's checkpoint.
#include "dist/ps/ps.h"

#include "common/error.h"
#include "common/files.h"
#include "dist/comm/gather.h"
#include "dist/compression/codec_file.h"
#include "dist/optimizer_state.h"
#include "dist/ps/protocol.h"
#include "dist/ps/state_message.h"
#include "dist/ps/whole_state.h"

#include <fmt/format.h>


namespace dtrain::dist {

NamedTensors PsStrategy::model_state() {
  sync_point();
  return module_state(*model_);
}

void PsStrategy::load_model_state(const NamedTensors& state) {
  copy_state(state, module_state(*model_));
  load_pending_ = load_pending_ || worker_index_ == 0;
}

void PsStrategy::load(const std::string& dir) {
  if (encoder_) {  // each worker its own residuals
    std::optional<compression::CodecState> state = compression::read_codec_state(
        dir, encoder_->kind(), encoder_->slots(), static_cast<int64_t>(params_.size()),
        worker_index_, num_workers_, params_.front().device());
    if (state) encoder_->set_state(std::move(*state));
  }
  if (worker_index_ != 0) return;
  // Only rank 0 reads; the servers receive their pieces at the next forward or sync point,
  // once every worker has agreed the checkpoint loads (trainer/resume.cpp).
  std::unique_ptr<torch::optim::Optimizer> whole = make_optimizer_(params_);
  load_optimizer_state(dir, params_, 0, static_cast<int64_t>(params_.size()), make_optimizer_,
                       *whole);
  whole_ = std::move(whole);
  load_pending_ = true;
}

void PsStrategy::commit_load() {
  if (num_workers_ > 1) {
    // Rank 0's word, as a sum of which the other workers' parts are 0.
    torch::Tensor pending = torch::tensor({load_pending_ && worker_index_ == 0 ? 1.0f : 0.0f});
    sum_over_workers(pending, "agreeing on a resume: a worker did not join");
    load_pending_ = pending.item<float>() > 0;
  }
  if (!load_pending_) return;
  load_pending_ = false;
  if (worker_index_ == 0) {
    for (int s = 0; s < num_servers_; ++s) {
      const ps::StateMessage message = server_state(plan_, s, params_, whole_.get());
      send_control(s, static_cast<int64_t>(ps::Command::kLoadState));
      torch::Tensor bytes = ps::encode(message);
      std::unique_ptr<Work> sent = requests_->send(bytes, server_rank(s), ps::kStateTag);
      wait_polling(*sent, fmt::format("sending server {} its state", s));
      receive_state(s);  // the acknowledgement
    }
    whole_.reset();
  }
  barrier_polling();  // no worker pushes before every server has its state
}

torch::Tensor PsStrategy::receive_state(int server) {
  std::optional<Envelope> envelope;
  wait_until(
      [&] { return (envelope = replies_->iprobe(server_rank(server), ps::kStateTag)).has_value(); },
      [&] { return fmt::format("waited for the state of server {}", server); });
  torch::Tensor bytes = torch::empty({envelope->bytes}, torch::kUInt8);
  replies_->recv_probed(*envelope, bytes)->wait();
  return bytes;
}

void PsStrategy::prepare_checkpoint() {
  sync_point();
  if (encoder_) {  // every worker's codec state, to rank 0, which writes them all
    gathered_codec_states_ = all_gather_bytes(
        *workers_comm_, compression::serialize_codec_state(encoder_->kind(), encoder_->slots(),
                                                           encoder_->state(), num_workers_));
    if (worker_index_ != 0) gathered_codec_states_.clear();
  }
  if (worker_index_ != 0) return;
  // Rank 0 assembles whole tensors' states from every server's pieces.
  std::vector<ps::StateMessage> servers;
  for (int s = 0; s < num_servers_; ++s) {
    send_control(s, static_cast<int64_t>(ps::Command::kSendState));
    servers.push_back(ps::decode(receive_state(s), torch::Tensor()));
  }
  whole_ = whole_optimizer(plan_, params_, make_optimizer_, servers);
}

void PsStrategy::save(const std::string& dir) const {
  DTRAIN_CHECK(whole_ != nullptr, "ps: save() without prepare_checkpoint() on every rank");
  save_optimizer(*whole_, dir);
  write_whole_file(dir + "/ps_plan.txt",
                   plan_.describe(names_, static_cast<int64_t>(params_.front().element_size())));
  if (encoder_) compression::write_codec_states(dir, gathered_codec_states_);
}

}  // namespace dtrain::dist
