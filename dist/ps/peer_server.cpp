#include "dist/ps/peer_server.h"

#include "common/error.h"

#include <c10/core/impl/VirtualGuardImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

namespace dtrain::dist {

namespace {

// How long the thread sleeps when nothing has arrived: well under a step. On GPUs a poll of
// every link costs a few event queries; on CPU ranks it shares the cores with the workers.
constexpr std::chrono::microseconds kIdleGpu(20);
constexpr std::chrono::microseconds kIdleCpu(100);

}  // namespace

int PsPeerServer::Round::count() const {
  int n = 0;
  for (const bool arrived : in) n += arrived ? 1 : 0;
  return n;
}

PsPeerServer::PsPeerServer(int me, std::vector<PsPeerLinks> links, PsShard& shard,
                           int64_t staleness, int64_t previews, bool fill_with_mean,
                           double timeout_s, std::optional<c10::Stream> stream)
    : me_(me),
      workers_(static_cast<int>(links.size())),
      links_(std::move(links)),
      shard_(shard),
      slots_(staleness + 2),
      previews_(previews),
      fill_with_mean_(fill_with_mean),
      timeout_s_(timeout_s),
      stream_(stream) {
  if (stream_) {
    lr_stream_ = c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA)
                     .getStreamFromGlobalPool(stream_->device());
    lr_host_ = torch::empty({1}, torch::dtype(torch::kFloat64).pinned_memory(true));
  }
  after_caller();  // the shard was made on the caller's stream
  grad_slots_.resize(static_cast<size_t>(workers_));
  incoming_.resize(static_cast<size_t>(workers_));
  done_.assign(static_cast<size_t>(workers_), false);
  for (int w = 0; w < workers_; ++w) {
    if (w == me_) continue;
    for (int64_t s = 0; s < slots_; ++s) {
      // Written only by receives, which the thread's stream orders.
      grad_slots_[static_cast<size_t>(w)].push_back(torch::empty_like(shard_.params()));
    }
  }
  thread_ = std::thread([this] { run(); });
}

PsPeerServer::~PsPeerServer() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

void PsPeerServer::after_caller() {
  if (!stream_) return;
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  c10::Event issued(c10::DeviceType::CUDA);
  issued.record(cuda.getStream(stream_->device()));
  issued.block(*stream_);
}

void PsPeerServer::push_own(PsPeerHandoff push) {
  std::lock_guard<std::mutex> lock(mutex_);
  own_pushes_.push_back(std::move(push));
}

int64_t PsPeerServer::newest_message() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return newest_;
}

double PsPeerServer::take_delivery_ms() {
  if (workers_ == 1) return std::numeric_limits<double>::quiet_NaN();
  std::lock_guard<std::mutex> lock(mutex_);
  const double mean = delivered_ > 0 ? delivered_ms_ / static_cast<double>(delivered_) : 0.0;
  delivered_ms_ = 0.0;
  delivered_ = 0;
  return mean;
}

PsPeerHandoff PsPeerServer::own_message(int64_t least, int64_t most) {
  std::unique_lock<std::mutex> lock(mutex_);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  while (true) {
    if (error_) std::rethrow_exception(error_);
    if (newest_ >= least) {
      for (auto it = own_messages_.rbegin(); it != own_messages_.rend(); ++it) {
        if (it->index <= most) return *it;
      }
      DTRAIN_CHECK(false, "ps server {}: message {} is no longer held", me_, most);
    }
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout && newest_ < least) {
      std::string owing;
      for (size_t w = 0; w < owing_.size(); ++w) {
        if (owing_[w]) owing += fmt::format("{}{}", owing.empty() ? "" : ", ", w);
      }
      throw UserError(fmt::format(
          "ps: rank {} waited {} s (dist.timeout_s) for its own server's message {}; the "
          "server has sent up to {}, its round {} without the push of worker rank(s) {}",
          me_, timeout_s_, least, newest_, owing_round_, owing.empty() ? "none" : owing));
    }
  }
}

void PsPeerServer::join() {
  if (thread_.joinable()) thread_.join();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

void PsPeerServer::run() {
  try {
    if (stream_) {  // this thread's device and current stream
      const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
      cuda.setDevice(stream_->device());
      cuda.exchangeStream(*stream_);
    }
    for (int w = 0; w < workers_; ++w) {
      if (w != me_) post_receives(w, 0);
    }
    while (!stop_ && !finished()) {
      bool busy = take_arrivals();
      busy = advance() || busy;
      retire_deliveries();
      if (!busy) std::this_thread::sleep_for(stream_ ? kIdleGpu : kIdleCpu);
    }
    for (const Delivery& delivery : sending_) {
      for (const auto& work : delivery.sends) work->wait();
    }
    sending_.clear();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
  }
  changed_.notify_all();
}

bool PsPeerServer::finished() const {
  for (const bool done : done_) {
    if (!done) return false;
  }
  return rounds_.empty() && sending_.empty();
}

torch::Tensor& PsPeerServer::grad_slot(int worker, int64_t t) {
  return grad_slots_[static_cast<size_t>(worker)][static_cast<size_t>(t % slots_)];
}

ServedBytes PsPeerServer::take_served() {
  return {served_sent_.exchange(0), served_received_.exchange(0)};
}

void PsPeerServer::post_receives(int worker, int64_t step) {
  Incoming& in = incoming_[static_cast<size_t>(worker)];
  const PsPeerLinks& link = links_[static_cast<size_t>(worker)];
  in.step = step;
  in.works.clear();
  const torch::Tensor& slot = grad_slot(worker, step);
  // Posted with this thread's stream current: on NCCL a receive waits for the work issued on
  // it so far, which includes the last round that read the slot.
  for (const int64_t c : shard_.chunk_ids()) {
    in.works.push_back(link.push_in->recv(shard_.chunk_of(slot, c), link.peer, kPeerLinkTag));
  }
  in.trailer = torch::empty({1}, shard_.params().options().dtype(torch::kFloat64));
  in.works.push_back(link.push_in->recv(in.trailer, link.peer, kPeerLinkTag));
  in.works.back()->test();  // launches them
}

double PsPeerServer::read_lr(const torch::Tensor& trailer) {
  if (!lr_stream_) return trailer.item<double>();
  // The receive has completed: the copy need not queue behind this thread's rounds. Into
  // pinned memory, then polled: a copy into pageable memory blocks inside the CUDA driver
  // until its stream gets there, holding a lock that every other thread's copies need (on
  // 2 x H200 the shared links' copies stood still behind such a read).
  const c10::impl::VirtualGuardImpl cuda(c10::DeviceType::CUDA);
  const c10::Stream before = cuda.exchangeStream(*lr_stream_);
  lr_host_.copy_(trailer, /*non_blocking=*/true);
  c10::Event copied(c10::DeviceType::CUDA);
  copied.record(*lr_stream_);
  cuda.exchangeStream(before);
  while (!copied.query()) std::this_thread::sleep_for(std::chrono::microseconds(2));
  return lr_host_.item<double>();
}

bool PsPeerServer::take_arrivals() {
  bool any = false;
  for (int w = 0; w < workers_; ++w) {
    Incoming& in = incoming_[static_cast<size_t>(w)];
    if (w == me_ || done_[static_cast<size_t>(w)]) continue;
    bool arrived = true;
    for (const auto& work : in.works) arrived = work->test() && arrived;
    if (!arrived) continue;
    any = true;
    const double lr = read_lr(in.trailer);
    if (std::isnan(lr)) {  // the worker has finished: nothing more comes
      done_[static_cast<size_t>(w)] = true;
      in.works.clear();
      continue;
    }
    DTRAIN_CHECK(in.step >= applied_, "ps server {}: worker {} pushed step {} after round {}",
                 me_, w, in.step, applied_);
    Round& round = rounds_[in.step];
    round.in.resize(static_cast<size_t>(workers_), false);
    round.in[static_cast<size_t>(w)] = true;
    round.last_in = Clock::now();
    round.lr = lr;
    post_receives(w, in.step + 1);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  while (!own_pushes_.empty() &&
         (!own_pushes_.front().ready || own_pushes_.front().ready->query())) {
    PsPeerHandoff push = std::move(own_pushes_.front());
    own_pushes_.pop_front();
    any = true;
    if (std::isnan(push.lr)) {
      done_[static_cast<size_t>(me_)] = true;
      continue;
    }
    Round& round = rounds_[push.index];
    round.in.resize(static_cast<size_t>(workers_), false);
    round.in[static_cast<size_t>(me_)] = true;
    round.last_in = Clock::now();
    round.lr = push.lr;
    own_pushes_taken_[push.index] = std::move(push);
  }
  // A few flags a pass, formatted only at a timeout: this loop polls every 20 us on GPUs.
  owing_round_ = applied_;
  owing_.assign(static_cast<size_t>(workers_), false);
  const auto oldest = rounds_.find(applied_);
  for (size_t w = 0; w < owing_.size(); ++w) {
    owing_[w] = !done_[w] && (oldest == rounds_.end() || !oldest->second.in[w]);
  }
  return any;
}

bool PsPeerServer::advance() {
  bool any = false;
  torch::NoGradGuard no_grad;
  for (auto it = rounds_.find(applied_); it != rounds_.end(); it = rounds_.find(applied_)) {
    Round& round = it->second;
    const int64_t t = applied_;
    const int in = round.count();
    if (in == workers_) {
      std::vector<int> all;
      for (int w = 0; w < workers_; ++w) all.push_back(w);
      average(t, all, static_cast<size_t>(workers_));
      // The peers' pushes count once applied, with their round's messages: a step's record
      // then holds whole rounds, whoever pushed first.
      served_received_ += (workers_ - 1) * shard_.numel() *
                          static_cast<int64_t>(shard_.params().element_size());
      shard_.step(round.lr);
      const torch::Tensor values = shard_.params().clone();  // the next round steps in place
      // Previews not sent yet carry the whole round: every worker's receives are posted.
      for (; round.previewed < previews_; ++round.previewed) {
        send(t * per_round() + round.previewed, values, round.last_in);
      }
      send((t + 1) * per_round() - 1, values, round.last_in);
      own_pushes_taken_.erase(t);
      rounds_.erase(it);
      ++applied_;
      any = true;
      continue;
    }
    // Preview p is due once workers - previews + p pushes are in.
    const auto due = [&] {
      return round.previewed < previews_ && in >= workers_ - previews_ + round.previewed;
    };
    if (due()) {
      std::vector<int> arrived;
      for (int w = 0; w < workers_; ++w) {
        if (round.in[static_cast<size_t>(w)]) arrived.push_back(w);
      }
      average(t, arrived, fill_with_mean_ ? arrived.size() : static_cast<size_t>(workers_));
      const torch::Tensor values = shard_.preview(round.lr);
      // Pushes that came together share one preview.
      for (; due(); ++round.previewed) {
        send(t * per_round() + round.previewed, values, round.last_in);
      }
      any = true;
    }
    break;
  }
  publish();
  return any;
}

void PsPeerServer::average(int64_t t, const std::vector<int>& workers, size_t divisor) {
  torch::Tensor grads = shard_.grads();
  grads.zero_();
  for (const int w : workers) {
    if (w == me_) {
      const PsPeerHandoff& push = own_pushes_taken_.at(t);
      if (push.ready) {
        push.ready->block(*stream_);
        push.values.record_stream(*stream_);
      }
      grads.add_(push.values);
    } else {
      // The host saw its receives complete: work issued from now on reads what they wrote.
      grads.add_(grad_slot(w, t));
    }
  }
  grads.div_(static_cast<double>(divisor));
}

void PsPeerServer::send(int64_t index, const torch::Tensor& values, Clock::time_point since) {
  Delivery delivery{{}, since};
  for (int w = 0; w < workers_; ++w) {
    if (w == me_) continue;
    const PsPeerLinks& link = links_[static_cast<size_t>(w)];
    delivery.sends.push_back(link.pull_out->send(values, link.peer, kPeerLinkTag));
    delivery.sends.back()->test();  // launches it
    served_sent_ += static_cast<int64_t>(values.nbytes());
  }
  if (!delivery.sends.empty()) sending_.push_back(std::move(delivery));
  PsPeerHandoff message{index, values, nullptr, 0.0};
  if (stream_) {
    message.ready = std::make_shared<c10::Event>(c10::DeviceType::CUDA);
    message.ready->record(*stream_);
  }
  unpublished_.push_back(std::move(message));
}

void PsPeerServer::retire_deliveries() {
  double ms = 0.0;
  int64_t retired = 0;
  for (auto it = sending_.begin(); it != sending_.end();) {
    auto& sends = it->sends;
    sends.erase(std::remove_if(sends.begin(), sends.end(),
                               [](const std::unique_ptr<Work>& work) { return work->test(); }),
                sends.end());
    if (!sends.empty()) {
      ++it;
      continue;
    }
    ms += std::chrono::duration<double, std::milli>(Clock::now() - it->since).count();
    ++retired;
    it = sending_.erase(it);
  }
  if (retired == 0) return;
  std::lock_guard<std::mutex> lock(mutex_);
  delivered_ms_ += ms;
  delivered_ += retired;
}

void PsPeerServer::publish() {
  if (unpublished_.empty()) return;
  {
    // At once: a worker waiting for a late round also finds the next round's previews, which
    // the late push let this pass send right behind it.
    std::lock_guard<std::mutex> lock(mutex_);
    for (PsPeerHandoff& message : unpublished_) {
      newest_ = message.index;
      own_messages_.push_back(std::move(message));
    }
    // The worker reads nothing older than its bound: a few rounds' messages suffice.
    while (static_cast<int64_t>(own_messages_.size()) > per_round() * slots_) {
      own_messages_.pop_front();
    }
  }
  unpublished_.clear();
  changed_.notify_all();
}

}  // namespace dtrain::dist
