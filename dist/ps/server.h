// One parameter server: the fp32 (or the model's dtype) master copy of the chunks the plan
// places on it, an optimizer over their pieces, and the consistency rule that decides when
// the workers' pushes are applied:
//   bsp, ssp  a round per step: once every worker has pushed step t's gradients and sent its
//             step message, their average is applied in one optimizer step at that step's
//             lr, and the chunks go to every worker. The rounds are those of BSP whatever
//             the staleness: SSP differs only in what the workers wait for (dist/ps/ps.h).
//             With ssp_reads = "partial", once all workers but one have pushed the round in
//             progress, the chunks go out a first time as that step would leave them with
//             those pushes alone (the missing one counted as zero, the momentum term whole),
//             marked partial; the round itself is applied as before when the last push
//             arrives. A worker at step t + 1 then reads round t without only the straggler's
//             share, where it would otherwise read round t - 1: one late share in four costs
//             about 1.07x BSP's steps to a loss, a whole round's delay 2.3x (PERFORMANCE.md).
//   async     each worker's complete push (all of its chunks here, and its step message) is
//             one optimizer step at lr / workers, answered to that worker alone.
// Pushes are summed in worker order, so a round is reproducible bit for bit. Under a hierarchy
// (dist.ps.hierarchical) the pushing "workers" are the node leaders, each pushing its node's
// sum: a round divides by the number of workers behind them, not by the leaders.
//
// LARS's and LAMB's norms are those of whole tensors although a tensor's pieces lie in
// several chunks and on several servers: each round, the servers add up their pieces'
// squared norms per tensor in one all-reduce (bsp and ssp). Async places each tensor on one
// server, which then needs nobody.
//
// The server never blocks its caller for long: poll() takes what has arrived, applies what is
// complete and returns. A dedicated server rank runs serve(); a colocated one is polled by
// its worker wherever the worker waits and from its gradient hooks (dist/ps/ps.h).
#pragma once

#include "dist/comm/communicator.h"
#include "dist/ps/live_workers.h"
#include "dist/ps/plan.h"
#include "dist/ps/shard.h"
#include "dist/step_comm.h"
#include "dist/strategy.h"

#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace dtrain::dist {

enum class Consistency { kBsp, kSsp, kAsync };

struct PsServerSetup {
  const PsPlan* plan = nullptr;
  int index = 0;                  // which server of the plan
  // The ranks that push (in `requests`), in worker order: every worker, or with a hierarchy
  // each node's leader, whose push is its node's sum.
  std::vector<int> worker_ranks;
  // The workers whose gradients a round's pushes sum: a round applies their average.
  int num_workers = 1;
  Consistency consistency = Consistency::kBsp;
  // MPI, every rank, two matching spaces: `requests` carries what workers send (the server
  // takes any message there), `replies` what servers send (a colocated worker takes its own).
  std::shared_ptr<Communicator> requests;
  std::shared_ptr<Communicator> replies;
  std::shared_ptr<Communicator> servers;  // MPI, the servers: the norms of split tensors
  double timeout_s = 300.0;
  // dist.ps.tolerate_worker_loss (async, dedicated): a lost worker is dropped, not waited
  // for. Server 0 keeps the roll (dist/ps/live_workers.h) and tells the others, whose ranks
  // in `requests` these are, in server order.
  bool tolerate_worker_loss = false;
  std::vector<int> server_ranks;
  // dist.compression: every push is an encoded message (dist/ps/protocol.h), decoded on
  // arrival into the dense gradient a push otherwise is.
  bool encoded_pushes = false;
  // ssp_reads = "partial" (ssp, SGD): rounds in progress are sent once all workers but one
  // have pushed them, the missing push taken as the others' mean (dist.ps.preview_fill =
  // "mean") or as zero.
  bool partial_rounds = false;
  bool fill_with_mean = true;
};

class PsServer {
 public:
  // `params`: the model's trainable parameters (any device), whose values the chunks start
  // from; `names` for messages.
  PsServer(PsServerSetup setup, const std::vector<torch::Tensor>& params,
           std::vector<std::string> names, const OptimizerFactory& make_optimizer);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // Takes what has arrived and applies what is complete. Returns quickly (a round's norm
  // all-reduce over the servers excepted).
  void poll();
  // Polls until every worker has finished (a dedicated server's life).
  void serve();
  // Every worker has finished and every message sent has been received.
  bool finished() const;
  // Every message sent has been received.
  bool sent() const { return sending_.empty(); }

  int index() const { return s_.index; }
  int64_t version() const { return shard_.version(); }
  // The ranks of the workers that owe this server a push ("1, 3"; empty if none): with no
  // complete push queued here, they are what the round in progress waits for.
  std::string owing_ranks() const;
  // Elements of parameters held here.
  int64_t numel() const { return shard_.numel(); }
  double optimizer_state_mb() const { return shard_.optimizer_state_mb(); }
  // Milliseconds spent decoding encoded pushes since the last call.
  double take_decode_ms();
  // The pushes applied from, and the parameters sent to, workers on other ranks since the
  // last call (their chunks' bytes, as the workers count them; control messages are not).
  ServedBytes take_served();

 private:
  // A roll call's part is received beside the pushes, under this "chunk".
  static constexpr int64_t kRollCall = -1;
  struct Incoming {
    size_t worker = 0;
    int64_t local = 0;  // the chunk's index in chunk_ids_, or kRollCall
    std::unique_ptr<Work> work;
    torch::Tensor buffer;
  };
  struct Outgoing {
    std::unique_ptr<Work> work;
    torch::Tensor buffer;  // what MPI reads until the send completes
    int to = -1;           // the receiver's rank in `replies`
  };

  // Starts receiving every message that has arrived (matched probes: no receive is posted
  // before its message is there, so nothing is pending when the job ends), and takes the
  // pushes whose receive has completed. Never waits for a push: its sender may be computing.
  void take_arrivals();
  void handle_control(size_t worker, const torch::Tensor& message);
  // Server 0, with tolerate_worker_loss: drops the workers found lost and answers the roll.
  void keep_roll();
  // The answer to a roll call: 1 for each worker still training, then `sum`.
  torch::Tensor roll_answer(const torch::Tensor& sum) const;
  // Forgets worker `w`: its pushes not yet applied, messages to and from it, its step; it
  // counts as finished.
  void drop_worker(size_t w);
  void send(torch::Tensor message, int to, int tag);
  bool push_complete(size_t worker) const;
  // Worker `worker` has no complete push queued here, and is neither finished nor lost.
  bool owes_push(size_t worker) const;
  // grads() = the sum of `workers`' oldest pushes (in that order) over `divisor`; the pushes
  // stay queued.
  void average_pushes(const std::vector<size_t>& workers, size_t divisor);
  std::vector<size_t> all_workers() const;  // 0 .. workers - 1
  void apply_round();
  // With partial_rounds: the round in progress, once all workers but one have pushed it.
  void send_partial_round();
  void apply_push(size_t worker);
  // The oldest complete push of `worker` is applied: its bytes into served_ if it came from
  // another rank.
  void take_push_bytes(size_t worker);
  // Every chunk held here to `workers`: `values` laid out as the shard's parameters (none:
  // the parameters), `partial` for a round in progress.
  void send_chunks(const std::vector<size_t>& workers, const torch::Tensor& values = {},
                   bool partial = false);
  void send_state(size_t worker);
  void load_state(size_t worker);
  // Something has arrived that waits for more (a step's pushes from some workers only), or
  // a message is on its way.
  bool owed() const;
  // Owed something for `waited_s` past the timeout: names whom it waits for and ends the job.
  void end_if_stuck(double waited_s);
  torch::Tensor buffer_for(int64_t local);  // a push buffer of local chunk `local`
  // The dense gradient of a received push of local chunk `local`: `received` itself, or
  // decoded from it (encoded pushes).
  torch::Tensor dense_push(int64_t local, torch::Tensor received);
  size_t worker_of(int rank) const;

  PsServerSetup s_;
  std::vector<std::string> names_;
  PsShard shard_;  // on the host

  // [worker][local chunk]: pushes arrived and not yet applied, oldest first.
  std::vector<std::vector<std::deque<torch::Tensor>>> pushed_;
  std::vector<std::vector<torch::Tensor>> free_buffers_;  // [local chunk]: for reuse
  std::vector<Incoming> receiving_;  // pushes being received, in arrival order
  std::vector<std::deque<double>> step_lr_;  // [worker]: its complete pushes' lr, oldest first
  // [worker]: the bytes of its complete pushes, as step_lr_, and of the one arriving. A push
  // counts in the stats once applied, with its round: a step's record then holds whole
  // rounds, whoever pushed first.
  std::vector<std::deque<int64_t>> step_bytes_;
  std::vector<int64_t> arriving_bytes_;
  std::vector<Outgoing> sending_;
  std::vector<bool> worker_done_;
  size_t next_async_ = 0;
  bool partial_sent_ = false;  // the round in progress went out partial
  std::vector<std::chrono::steady_clock::time_point> heard_;  // [worker]: its last message
  std::vector<bool> lost_;               // [worker], with tolerate_worker_loss
  std::optional<LiveWorkers> roll_;      // server 0, with tolerate_worker_loss
  std::vector<torch::Tensor> roll_parts_;  // [worker]: its part of this roll's sum
  // Messages to and from lost workers, never to complete: kept, since waiting for them is
  // what destroying them would do.
  std::vector<std::unique_ptr<Work>> abandoned_;
  std::vector<torch::Tensor> abandoned_buffers_;
  // serve()'s timeout: the last message, or the last moment nothing was owed.
  std::chrono::steady_clock::time_point last_arrival_;
  double decode_ms_ = 0.0, total_decode_ms_ = 0.0;  // since take_decode_ms(), and in all
  ServedBytes served_;                               // since take_served()
  int64_t decoded_ = 0;                              // pushes decoded in all
};

}  // namespace dtrain::dist
