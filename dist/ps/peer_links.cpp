#include "dist/ps/peer_links.h"

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
  }
  return links;
}

}  // namespace dtrain::dist
