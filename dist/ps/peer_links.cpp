#include "dist/ps/peer_links.h"

#include "common/error.h"
#include "dist/comm/shared_link.h"

#include <torch/torch.h>

#include <algorithm>

namespace dtrain::dist {

namespace {

// Rank i's partner in round `round` of a round-robin over `n` ranks (the circle method, with
// a rank n that sits out where n is odd): every pair meets in exactly one of the rounds.
int partner(int i, int round, int n) {
  const int players = n % 2 == 0 ? n : n + 1;
  const int circle = players - 1;  // the last player stays put, the others turn
  if (i == circle) return round;
  if (i == round) return circle;
  return ((2 * round - i) % circle + circle) % circle;
}

// One message over each of a pair's four links, in the direction it carries, holding the
// sender's world rank. On NCCL a link connects at its first operation, and that set-up is a
// host call that waits for the peer and allocates on the device: done here, while no kernel
// of the transport is spinning, it cannot wait behind one, and the links' wiring is checked.
void connect(const PsPeerLinks& link, bool lower, int me, int peer_rank, torch::Device device) {
  const auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  const std::shared_ptr<Communicator> in_order[] = {
      lower ? link.push_out : link.push_in, lower ? link.push_in : link.push_out,
      lower ? link.pull_out : link.pull_in, lower ? link.pull_in : link.pull_out};
  for (const std::shared_ptr<Communicator>& comm : in_order) {
    if (comm == link.push_out || comm == link.pull_out) {
      comm->send(torch::full({1}, me, options), link.peer, /*tag=*/0)->wait();
    } else {
      torch::Tensor from = torch::full({1}, -1, options);
      comm->recv(from, link.peer, /*tag=*/0)->wait();
      const auto sender = static_cast<int>(from.item<float>());
      DTRAIN_CHECK(sender == peer_rank, "ps links: rank {} expected rank {} on a link, got {}",
                   me, peer_rank, sender);
    }
  }
}

}  // namespace

std::vector<PsPeerLinks> make_peer_links(Communicator& world, int max_ctas) {
  const int n = world.size();
  const int me = world.rank();
  std::vector<PsPeerLinks> links(static_cast<size_t>(n));
  const int rounds = n % 2 == 0 ? n - 1 : n;
  for (int round = 0; round < rounds; ++round) {
    const int peer = partner(me, round, n);
    const bool paired = peer < n && peer != me;
    // Each pair is named by its lower rank; a rank that sits out is alone under its own.
    const int color = paired ? std::min(me, peer) : me;
    std::shared_ptr<Communicator> pair = world.split(color, me);
    if (!paired) continue;
    std::shared_ptr<Communicator> first = pair->dup_with_max_ctas(max_ctas);
    std::shared_ptr<Communicator> second = pair->dup_with_max_ctas(max_ctas);
    std::shared_ptr<Communicator> third = pair->dup_with_max_ctas(max_ctas);
    std::shared_ptr<Communicator> fourth = pair->dup_with_max_ctas(max_ctas);
    // first: the lower rank's pushes; second: the higher's; third: the lower's pulls out;
    // fourth: the higher's.
    PsPeerLinks& link = links[static_cast<size_t>(peer)];
    const bool lower = me < peer;
    link.push_out = lower ? first : second;
    link.push_in = lower ? second : first;
    link.pull_out = lower ? third : fourth;
    link.pull_in = lower ? fourth : third;
    link.peer = 1 - pair->rank();
    link.pair = std::move(pair);
    connect(link, lower, me, peer, world.device());
  }
  return links;
}

void release_peer_links(std::vector<PsPeerLinks>& links, int me) {
  const int n = static_cast<int>(links.size());
  const int rounds = n % 2 == 0 ? n - 1 : n;
  for (int round = 0; round < rounds; ++round) {
    const int peer = partner(me, round, n);
    if (peer >= n || peer == me) continue;
    PsPeerLinks& link = links[static_cast<size_t>(peer)];
    const bool lower = me < peer;
    // first, second, third, fourth as make_peer_links named them, then their parent.
    (lower ? link.push_out : link.push_in).reset();
    (lower ? link.push_in : link.push_out).reset();
    (lower ? link.pull_out : link.pull_in).reset();
    (lower ? link.pull_in : link.pull_out).reset();
    link.pair.reset();
  }
  links.clear();
}

std::vector<PsPeerLinks> make_shared_peer_links(
    Communicator& world, const std::function<int64_t(int from, int to, bool pulls)>& capacity,
    double timeout_s) {
  const int n = world.size();
  const int me = world.rank();
  // Two links from every rank to every other, listed alike on every rank.
  std::vector<SharedLinkSpec> specs;
  std::vector<size_t> index(static_cast<size_t>(2 * n * n), 0);  // [2 (from n + to) + pulls]
  for (int from = 0; from < n; ++from) {
    for (int to = 0; to < n; ++to) {
      for (const bool pulls : {false, true}) {
        if (from == to) continue;
        index[static_cast<size_t>(2 * (from * n + to) + (pulls ? 1 : 0))] = specs.size();
        specs.push_back({from, to, capacity(from, to, pulls)});
      }
    }
  }
  const std::vector<std::shared_ptr<Communicator>> ends = make_shared_links(world, specs, timeout_s);
  const auto end = [&](int from, int to, bool pulls) {
    return ends[index[static_cast<size_t>(2 * (from * n + to) + (pulls ? 1 : 0))]];
  };

  std::vector<PsPeerLinks> links(static_cast<size_t>(n));
  for (int peer = 0; peer < n; ++peer) {
    if (peer == me) continue;
    PsPeerLinks& link = links[static_cast<size_t>(peer)];
    link.push_out = end(me, peer, false);
    link.push_in = end(peer, me, false);
    link.pull_out = end(me, peer, true);
    link.pull_in = end(peer, me, true);
    link.peer = 1 - link.push_out->rank();
  }
  // In the tournament's rounds, as the communicator's links (a send here never waits for
  // its receive, but the order is the one connect() expects).
  const int rounds = n % 2 == 0 ? n - 1 : n;
  for (int round = 0; round < rounds; ++round) {
    const int peer = partner(me, round, n);
    if (peer < n && peer != me) {
      connect(links[static_cast<size_t>(peer)], me < peer, me, peer, world.device());
    }
  }
  return links;
}

}  // namespace dtrain::dist
