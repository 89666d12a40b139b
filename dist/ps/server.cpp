#include "dist/ps/server.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/mpi_communicator.h"
#include "dist/ps/protocol.h"
#include "dist/ps/push_codec.h"
#include "dist/ps/state_message.h"

#include <fmt/format.h>

#include <algorithm>
#include <numeric>
#include <thread>
#include <utility>

namespace dtrain::dist {

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

PsServer::PsServer(PsServerSetup setup, const std::vector<torch::Tensor>& params,
                   std::vector<std::string> names, const OptimizerFactory& make_optimizer)
    : s_(std::move(setup)), names_(std::move(names)),
      shard_(*s_.plan, s_.index, params, torch::kCPU, make_optimizer,
             PsShard::sum_over(s_.servers),
             s_.consistency == Consistency::kAsync),
      last_arrival_(Clock::now()) {
  const size_t workers = s_.worker_ranks.size();
  const size_t chunks = shard_.chunk_ids().size();
  pushed_.assign(workers, std::vector<std::deque<torch::Tensor>>(chunks));
  free_buffers_.assign(chunks, {});
  step_lr_.assign(workers, {});
  step_bytes_.assign(workers, {});
  arriving_bytes_.assign(workers, 0);
  worker_done_.assign(workers, false);
  lost_.assign(workers, false);
  heard_.assign(workers, Clock::now());
  if (s_.tolerate_worker_loss && s_.index == 0) {
    roll_.emplace(static_cast<int>(workers), s_.timeout_s, Clock::now());
    roll_parts_.assign(workers, torch::Tensor());
  }
}

PsServer::~PsServer() {
  // Never to complete, and destroying a Work waits for it.
  for (std::unique_ptr<Work>& work : abandoned_) (void)work.release();
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
  if (free.empty()) {
    return torch::empty({s_.plan->chunks[shard_.chunk_ids()[local]].numel},
                        shard_.params().options());
  }
  torch::Tensor buffer = std::move(free.back());
  free.pop_back();
  return buffer;
}

torch::Tensor PsServer::dense_push(int64_t local, torch::Tensor received) {
  if (!s_.encoded_pushes) return received;
  const auto start = Clock::now();
  torch::Tensor dense = buffer_for(local);
  ps::decode_push(received, dense);
  const double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  decode_ms_ += ms;
  total_decode_ms_ += ms;
  ++decoded_;
  return dense;
}

double PsServer::take_decode_ms() {
  const double ms = decode_ms_;
  decode_ms_ = 0.0;
  return ms;
}

void PsServer::take_push_bytes(size_t worker) {
  if (s_.worker_ranks[worker] != s_.replies->rank()) {
    served_.received += step_bytes_[worker].front();
  }
  step_bytes_[worker].pop_front();
}

ServedBytes PsServer::take_served() {
  return std::exchange(served_, ServedBytes());
}

void PsServer::take_arrivals() {
  while (std::optional<Envelope> envelope = s_.requests->iprobe(kAnySource, kAnyTag)) {
    last_arrival_ = Clock::now();
    const bool from_worker = std::find(s_.worker_ranks.begin(), s_.worker_ranks.end(),
                                       envelope->source) != s_.worker_ranks.end();
    if (envelope->tag == ps::kMembershipTag && !from_worker) {  // server 0: a worker is lost
      torch::Tensor message = torch::empty({3}, torch::kFloat64);
      s_.requests->recv_probed(*envelope, message)->wait();
      drop_worker(static_cast<size_t>(ps::Control::decode(message).clock));
      continue;
    }
    const size_t worker = worker_of(envelope->source);
    heard_[worker] = last_arrival_;
    if (roll_) roll_->heard(worker, last_arrival_);
    if (lost_[worker]) {  // alive after all, but too late: its messages are dropped unread
      torch::Tensor discarded = torch::empty({envelope->bytes}, torch::kUInt8);
      s_.requests->recv_probed(*envelope, discarded)->wait();
      if (roll_ && envelope->tag == ps::kMembershipTag) {  // its roll call: tell it it is out
        send(roll_answer(torch::zeros({envelope->bytes / 8}, torch::kFloat64)), envelope->source,
             ps::kMembershipTag);
      }
      continue;
    }
    if (envelope->tag == ps::kMembershipTag) {
      DTRAIN_CHECK(roll_.has_value(), "ps server {}: a roll call from worker {}, but only server "
                   "0 keeps the roll, with dist.ps.tolerate_worker_loss", s_.index, worker);
      torch::Tensor part = torch::empty({envelope->bytes / 8}, torch::kFloat64);
      receiving_.push_back({worker, kRollCall, s_.requests->recv_probed(*envelope, part), part});
      continue;
    }
    if (envelope->tag == ps::kControlTag) {
      torch::Tensor message = torch::empty({3}, torch::kFloat64);
      s_.requests->recv_probed(*envelope, message)->wait();
      handle_control(worker, message);
      continue;
    }
    DTRAIN_CHECK(ps::is_push_tag(envelope->tag), "ps server {}: unexpected tag {} from rank {}",
                 s_.index, envelope->tag, envelope->source);
    const int64_t chunk = ps::pushed_chunk(envelope->tag);
    const std::vector<int64_t>& held = shard_.chunk_ids();
    const int64_t local = std::find(held.begin(), held.end(), chunk) - held.begin();
    DTRAIN_CHECK(local < static_cast<int64_t>(held.size()),
                 "ps server {}: a push of chunk {}, which another server holds", s_.index, chunk);
    arriving_bytes_[worker] += envelope->bytes;
    torch::Tensor buffer =
        s_.encoded_pushes ? torch::empty({envelope->bytes}, torch::kUInt8) : buffer_for(local);
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
    if (in.local == kRollCall) {
      roll_->called(in.worker, Clock::now());
      roll_parts_[in.worker] = std::move(in.buffer);
    } else {
      pushed_[in.worker][in.local].push_back(dense_push(in.local, std::move(in.buffer)));
    }
    receiving_.erase(receiving_.begin() + static_cast<int64_t>(i));
  }
}

void PsServer::handle_control(size_t worker, const torch::Tensor& message) {
  const ps::Control control = ps::Control::decode(message);
  switch (control.command) {
    case ps::Command::kStep:  // after the step's pushes: MPI keeps a sender's order
      step_lr_[worker].push_back(control.value);
      step_bytes_[worker].push_back(std::exchange(arriving_bytes_[worker], 0));
      break;
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
  if (roll_) keep_roll();
  const size_t workers = s_.worker_ranks.size();
  if (s_.consistency == Consistency::kAsync) {
    // Round robin from the worker after the last one served: no worker starves.
    for (size_t k = 0; k < workers; ++k) {
      const size_t worker = (next_async_ + k) % workers;
      if (lost_[worker] || !push_complete(worker)) continue;
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
    if (s_.partial_rounds && !partial_sent_) send_partial_round();
  }
  sending_.erase(std::remove_if(sending_.begin(), sending_.end(),
                                [](Outgoing& out) { return out.work->test(); }),
                 sending_.end());
}

void PsServer::average_pushes(const std::vector<size_t>& workers, size_t divisor) {
  // Summed in worker order: the same bits whatever the arrival order.
  const std::vector<int64_t>& held = shard_.chunk_ids();
  for (size_t local = 0; local < held.size(); ++local) {
    torch::Tensor sum = shard_.chunk_grads(held[local]);
    sum.copy_(pushed_[workers.front()][local].front());
    for (size_t i = 1; i < workers.size(); ++i) sum.add_(pushed_[workers[i]][local].front());
  }
  shard_.grads().div_(static_cast<double>(divisor));
}

std::vector<size_t> PsServer::all_workers() const {
  std::vector<size_t> all(s_.worker_ranks.size());
  std::iota(all.begin(), all.end(), size_t{0});
  return all;
}

void PsServer::apply_round() {
  const std::vector<size_t> all = all_workers();
  average_pushes(all, static_cast<size_t>(s_.num_workers));
  for (auto& queues : pushed_) {
    for (size_t local = 0; local < queues.size(); ++local) {
      free_buffers_[local].push_back(std::move(queues[local].front()));
      queues[local].pop_front();
    }
  }
  const double lr = step_lr_[0].front();
  for (auto& queue : step_lr_) queue.pop_front();
  for (size_t w = 0; w < step_bytes_.size(); ++w) take_push_bytes(w);
  shard_.step(lr);
  partial_sent_ = false;
  send_chunks(all);
}

void PsServer::send_partial_round() {
  std::vector<size_t> pushed;
  for (const size_t w : all_workers()) {
    if (push_complete(w)) pushed.push_back(w);
  }
  const size_t workers = s_.worker_ranks.size();
  if (workers < 2 || pushed.size() + 1 != workers) return;
  // The pushes stay queued for the round.
  average_pushes(pushed, s_.fill_with_mean ? pushed.size() : static_cast<size_t>(s_.num_workers));
  const torch::Tensor preview = shard_.preview(step_lr_[pushed.front()].front());
  partial_sent_ = true;
  send_chunks(all_workers(), preview, /*partial=*/true);
}

void PsServer::apply_push(size_t worker) {
  const std::vector<int64_t>& held = shard_.chunk_ids();
  for (size_t local = 0; local < held.size(); ++local) {
    torch::Tensor push = std::move(pushed_[worker][local].front());
    pushed_[worker][local].pop_front();
    shard_.chunk_grads(held[local]).copy_(push);
    free_buffers_[local].push_back(std::move(push));
  }
  // One push is one worker's share of a step: W of them make one step at lr.
  const double lr = step_lr_[worker].front() / static_cast<double>(s_.worker_ranks.size());
  step_lr_[worker].pop_front();
  take_push_bytes(worker);
  shard_.step(lr);
  send_chunks({worker});
}

void PsServer::send_chunks(const std::vector<size_t>& workers, const torch::Tensor& values,
                           bool partial) {
  const int64_t header = ps::header_numel(shard_.params().scalar_type());
  const torch::Tensor& from = values.defined() ? values : shard_.params();
  for (const int64_t chunk : shard_.chunk_ids()) {
    const int64_t numel = s_.plan->chunks[chunk].numel;
    torch::Tensor message = torch::empty({header + numel}, shard_.params().options());
    ps::write_version(message, shard_.version(), partial);
    message.narrow(0, header, numel).copy_(shard_.chunk_of(from, chunk));
    for (const size_t w : workers) {
      if (s_.worker_ranks[w] != s_.replies->rank()) {
        served_.sent += numel * static_cast<int64_t>(message.element_size());
      }
      send(message, s_.worker_ranks[w], ps::params_tag(chunk));
    }
  }
}

void PsServer::send_state(size_t worker) {
  torch::Tensor bytes = ps::encode(shard_.state());
  send(bytes, s_.worker_ranks[worker], ps::kStateTag);
}

void PsServer::load_state(size_t worker) {
  const Envelope envelope = s_.requests->probe(s_.worker_ranks[worker], ps::kStateTag);
  torch::Tensor bytes = torch::empty({envelope.bytes}, torch::kUInt8);
  s_.requests->recv_probed(envelope, bytes)->wait();
  shard_.load_state(ps::decode(bytes, shard_.params()));
  torch::Tensor ack = torch::zeros({1}, torch::kInt64);
  send(ack, s_.worker_ranks[worker], ps::kStateTag);
}

void PsServer::send(torch::Tensor message, int to, int tag) {
  std::unique_ptr<Work> work = s_.replies->send(message, to, tag);
  sending_.push_back({std::move(work), std::move(message), to});
}

void PsServer::keep_roll() {
  for (const size_t w : roll_->find_lost(Clock::now())) {
    const int rank = s_.worker_ranks[w];
    if (w == 0) {
      log::error("rank {}: ps server 0: worker rank 0 sent nothing for dist.timeout_s = {} s "
                 "while the others waited at a collective; it writes the run's checkpoints and "
                 "metrics, so its loss is not tolerated; ending the job",
                 error_rank(), s_.timeout_s);
      abort_world(3);
    }
    log::warn("rank {}: ps server 0: worker rank {} sent nothing for dist.timeout_s = {} s while "
              "the others waited at a collective: taken as lost; {} of {} workers train on "
              "(dist.ps.tolerate_worker_loss)",
              error_rank(), rank, s_.timeout_s, roll_->live(), s_.worker_ranks.size());
    for (size_t server = 1; server < s_.server_ranks.size(); ++server) {
      const ps::Control lost{ps::Command::kWorkerLost, static_cast<int64_t>(w), 0.0};
      torch::Tensor message = lost.encode();
      sending_.push_back({s_.requests->send(message, s_.server_ranks[server], ps::kMembershipTag),
                          message, -1});
    }
    drop_worker(w);
  }
  if (!roll_->answer(Clock::now())) return;
  // Every worker still counted has called (LiveWorkers::answer), and only those have parts:
  // summed in worker order, the same whoever called first.
  torch::Tensor sum;
  for (size_t w = 0; w < roll_parts_.size(); ++w) {
    torch::Tensor part = std::move(roll_parts_[w]);
    roll_parts_[w] = torch::Tensor();
    if (roll_->lost(w)) continue;
    if (!sum.defined()) {
      sum = std::move(part);
      continue;
    }
    DTRAIN_CHECK(part.numel() == sum.numel(), "ps server 0: worker rank {} called the roll with "
                 "{} values, another with {}: the workers disagree on their collective",
                 s_.worker_ranks[w], part.numel(), sum.numel());
    sum.add_(part);
  }
  const torch::Tensor answer = roll_answer(sum);
  for (size_t w = 0; w < roll_parts_.size(); ++w) {
    if (!roll_->lost(w)) send(answer.clone(), s_.worker_ranks[w], ps::kMembershipTag);
  }
}

torch::Tensor PsServer::roll_answer(const torch::Tensor& sum) const {
  return torch::cat({torch::tensor(roll_->mask(), torch::kInt64).to(torch::kFloat64), sum});
}

void PsServer::drop_worker(size_t w) {
  if (lost_[w]) return;
  lost_[w] = true;
  last_arrival_ = Clock::now();  // a decision, as good as a message: serve()'s timeout restarts
  worker_done_[w] = true;
  step_lr_[w].clear();
  step_bytes_[w].clear();
  for (size_t local = 0; local < pushed_[w].size(); ++local) {
    for (torch::Tensor& push : pushed_[w][local]) free_buffers_[local].push_back(std::move(push));
    pushed_[w][local].clear();
  }
  const int rank = s_.worker_ranks[w];
  const auto abandon = [this](std::unique_ptr<Work> work, torch::Tensor buffer) {
    abandoned_.push_back(std::move(work));
    abandoned_buffers_.push_back(std::move(buffer));
  };
  for (auto in = receiving_.begin(); in != receiving_.end();) {
    if (in->worker != w) {
      ++in;
      continue;
    }
    abandon(std::move(in->work), std::move(in->buffer));
    in = receiving_.erase(in);
  }
  for (auto out = sending_.begin(); out != sending_.end();) {
    if (out->to != rank) {
      ++out;
      continue;
    }
    abandon(std::move(out->work), std::move(out->buffer));
    out = sending_.erase(out);
  }
  if (s_.index != 0) {
    log::info("rank {}: ps server {}: worker rank {} dropped", error_rank(), s_.index, rank);
  }
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
    if (waited_s > s_.timeout_s) end_if_stuck(waited_s);
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  if (s_.encoded_pushes) {  // a dedicated server's decode time, which no worker reports
    log::info("rank {}: ps server {}: decoded {} encoded pushes in {:.1f} ms", error_rank(),
              s_.index, decoded_, total_decode_ms_);
  }
}

bool PsServer::owes_push(size_t worker) const {
  return !worker_done_[worker] && !lost_[worker] && step_lr_[worker].empty();
}

std::string PsServer::owing_ranks() const {
  std::string ranks;
  for (size_t w = 0; w < worker_done_.size(); ++w) {
    if (owes_push(w)) ranks += fmt::format("{}{}", ranks.empty() ? "" : ", ", s_.worker_ranks[w]);
  }
  return ranks;
}

void PsServer::end_if_stuck(double waited_s) {
  size_t missing_count = 0, live = 0;
  for (size_t w = 0; w < worker_done_.size(); ++w) {
    live += !worker_done_[w] && !lost_[w];
    missing_count += owes_push(w);
  }
  // Tolerating worker loss, server 0 decides within the timeout who is lost; the others wait
  // for its word. Without tolerance, a server missing every worker's push cannot tell a dead
  // worker from the rest waiting for it in a collective of their own; those collectives'
  // watchdogs name the missing rank, so the server gives them the first word.
  const bool defers = s_.tolerate_worker_loss ? s_.index != 0 : missing_count == live;
  if (waited_s <= (defers ? 2 : 1) * s_.timeout_s) return;
  const std::string missing = owing_ranks();
  const auto silent = std::min_element(heard_.begin(), heard_.end()) - heard_.begin();
  log::error("rank {}: ps server {} waited {:.0f} s (dist.timeout_s) for the rest of a step; "
             "no complete push from worker rank(s) {}; silent longest: worker rank {} "
             "({:.0f} s); ending the job",
             error_rank(), s_.index, waited_s, missing.empty() ? "none" : missing,
             s_.worker_ranks[static_cast<size_t>(silent)],
             std::chrono::duration<double>(Clock::now() - heard_[silent]).count());
  abort_world(3);
}

bool PsServer::finished() const {
  for (const bool done : worker_done_) {
    if (!done) return false;
  }
  return sending_.empty() && receiving_.empty();
}

}  // namespace dtrain::dist
