// The server of the point-to-point transport (dist/ps/peer.h): this rank's shard, served by a
// thread of its own so that it answers pushes while its worker computes, sleeps as a
// straggler, or waits.
//
// Rounds are BSP's: round t is one optimizer step over the average of every worker's push of
// step t, applied in worker order once all of them are in and round t - 1 is applied, and
// then sent to every worker (message t without previews). With previews (ssp_reads =
// "partial", W workers, P = dist.ps.previews, W - 1 by default) a round is P + 1 messages:
// P previews, then the round itself (message t(P + 1) + P). Preview i (message t(P + 1) + i)
// is the round as it would stand with the first W - P + i pushes to arrive (at P = W - 1,
// after every push): SGD's step with the missing pushes taken as the mean of those in
// (`fill_with_mean`, dist.ps.preview_fill) or as zero, the momentum term whole
// (dist/ps/shard.h), sent as soon as they are in and round t - 1 is applied. A worker
// thus reads a round in progress, missing only the shares of workers that are late, where it
// would otherwise read the round before. Every message is sent to every worker, in order,
// so a worker's receives are posted before they are needed and each matches its send:
// pushes that arrive together share a preview, sent once per message.
//
// A peer worker's step t arrives as its chunks then a trailer holding the step's lr (NaN:
// the worker has finished); the trailer's arrival, seen by the thread testing it, means the
// chunks are in too. The receives of step t + 1 are posted as soon as step t's trailer
// arrives, into one of k + 2 slots per worker: SSP's bound keeps a worker from pushing step
// t + k + 2 before round t is applied. This rank's own worker hands its pushes over in
// memory (push_own) and takes its messages the same way (own_message).
//
// Streams (GPUs): the thread's work runs on a stream of its own, which waits for a push's
// receive or own copy on the device only once the host has seen it complete, so the stream
// never waits for anything that has not happened yet.
#pragma once

#include "dist/ps/peer_links.h"
#include "dist/ps/shard.h"
#include "dist/step_comm.h"

#include <c10/core/Event.h>
#include <c10/core/Stream.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace dtrain::dist {

// Something made on one stream for another: its values, ready once `ready` has happened
// (GPUs; none on the CPU, where it is ready when handed over).
struct PsPeerHandoff {
  int64_t index = 0;  // a push: its step; a message: its number
  torch::Tensor values;
  std::shared_ptr<c10::Event> ready;
  double lr = 0.0;  // a push: its step's lr (NaN: its worker has finished)
};

class PsPeerServer {
 public:
  // `links`: every rank's, indexed by world rank (dist/ps/peer_links.h); the server side
  // of each is used by the thread alone. `stream`: the thread's stream (GPUs). `previews`:
  // of each round, sent at its last `previews` pushes but the final one (0: none; at most
  // workers - 1).
  PsPeerServer(int me, std::vector<PsPeerLinks> links, PsShard& shard, int64_t staleness,
               int64_t previews, bool fill_with_mean, double timeout_s,
               std::optional<c10::Stream> stream);
  ~PsPeerServer();
  PsPeerServer(const PsPeerServer&) = delete;
  PsPeerServer& operator=(const PsPeerServer&) = delete;

  // Messages per round: the previews, then the round.
  int64_t per_round() const { return previews_ + 1; }
  // The thread's work from now on comes after what the caller's stream has been given (a
  // checkpoint loaded into the shard).
  void after_caller();
  // This rank's worker: its push of a step (its chunks of this shard, laid out as the shard's
  // parameters), or that it has finished (lr NaN).
  void push_own(PsPeerHandoff push);
  // This rank's worker: the newest message numbered from `least` to `most`, once one numbered
  // `least` or more has been sent; waits for it up to the timeout. Rethrows what ended the
  // thread.
  PsPeerHandoff own_message(int64_t least,
                            int64_t most = std::numeric_limits<int64_t>::max());
  // The newest message sent so far (-1: none).
  int64_t newest_message() const;
  // The mean time from the push that completed a message (a preview or a round) to that
  // message delivered to every peer worker, over the messages delivered since the last call
  // (0: none); NaN where it has none to deliver (a single worker). What a read that waits for
  // a round in progress waits for beyond the pushes themselves.
  double take_delivery_ms();
  // The bytes of the peer workers' pushes applied, and of the messages sent to them, since
  // the last call.
  ServedBytes take_served();
  // Every worker has finished, every message sent has been received: the thread ends.
  void join();

 private:
  using Clock = std::chrono::steady_clock;
  struct Round {
    std::vector<bool> in;  // per worker: its push has arrived
    Clock::time_point last_in;  // when the thread took the newest of them
    double lr = 0.0;
    int64_t previewed = 0;  // previews sent
    int count() const;
  };
  struct Delivery {  // a message on its way to the peer workers
    std::vector<std::unique_ptr<Work>> sends;
    Clock::time_point since;  // its round's newest push taken
  };
  struct Incoming {  // a peer worker's step being received
    int64_t step = 0;
    std::vector<std::unique_ptr<Work>> works;  // the chunks', then the trailer's
    torch::Tensor trailer;
  };

  void run();
  // Takes the trailers that have arrived; returns whether any did.
  bool take_arrivals();
  void post_receives(int worker, int64_t step);
  double read_lr(const torch::Tensor& trailer);
  // Applies or previews round applied_ where its pushes allow; returns whether it did.
  bool advance();
  // shard.grads() = the sum of `workers`' pushes of round `t` over `divisor`.
  void average(int64_t t, const std::vector<int>& workers, size_t divisor);
  // Message `index` (`values`, laid out as the shard's parameters) of a round whose newest
  // push was taken at `since` to every worker; to the own worker at the next publish().
  void send(int64_t index, const torch::Tensor& values, Clock::time_point since);
  // Drops the deliveries complete, their times into the stats.
  void retire_deliveries();
  void publish();
  torch::Tensor& grad_slot(int worker, int64_t t);
  bool finished() const;

  int me_;
  int workers_;
  std::vector<PsPeerLinks> links_;
  PsShard& shard_;
  int64_t slots_;  // per worker: steps whose pushes may be held at once
  int64_t previews_;  // per round, at its last `previews_` pushes but the final one
  bool fill_with_mean_;  // a preview's missing pushes: the mean of those in, or zero
  double timeout_s_;
  std::optional<c10::Stream> stream_;
  std::optional<c10::Stream> lr_stream_;  // GPUs: reads the trailers without queueing
  torch::Tensor lr_host_;  // GPUs: pinned, where a trailer is read

  std::vector<std::vector<torch::Tensor>> grad_slots_;  // [worker][slot], peers only
  std::vector<Incoming> incoming_;                      // [worker], peers only
  std::vector<bool> done_;                              // [worker]: finished
  std::map<int64_t, Round> rounds_;  // rounds with pushes, not yet applied
  int64_t applied_ = 0;
  std::deque<Delivery> sending_;
  std::map<int64_t, PsPeerHandoff> own_pushes_taken_;  // by step, until applied
  std::vector<PsPeerHandoff> unpublished_;  // messages of this pass, for the own worker

  mutable std::mutex mutex_;  // guards what follows, shared with the main thread
  std::condition_variable changed_;  // a message for the own worker, or the thread's end
  std::deque<PsPeerHandoff> own_pushes_;    // handed over, not yet taken
  std::deque<PsPeerHandoff> own_messages_;  // the newest few
  // For a timeout's line: the oldest round not applied, and the workers whose push it lacks.
  int64_t owing_round_ = 0;
  std::vector<bool> owing_;  // [worker]
  int64_t newest_ = -1;
  double delivered_ms_ = 0.0;  // since the last take_delivery_ms()
  int64_t delivered_ = 0;
  // Since the last take_served(): written by the thread, taken by the worker.
  std::atomic<int64_t> served_sent_{0}, served_received_{0};
  std::exception_ptr error_;

  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace dtrain::dist
