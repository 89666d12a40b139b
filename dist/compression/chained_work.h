// A Work of two operations where the second needs the first's result (PowerSGD's P round,
// then its Q round): the second starts (`then`) in wait(), which then waits for it; test()
// only drives the first (the reducer's polls from the gradient hooks on MPI). Never from a
// test(): whether a poll finds the first complete differs between ranks, and MPI matches
// collectives by the order they are issued, so a second started from a poll on one rank and
// after the next bucket's first on another would be matched with it. wait() comes at the same
// point of every rank's sequence (the reducer completes buckets in order). Timed from the
// first's start to the second's end.
#pragma once

#include "dist/comm/communicator.h"

#include <functional>
#include <memory>

namespace dtrain::dist::compression {

class ChainedWork : public Work {
 public:
  ChainedWork(std::unique_ptr<Work> first, std::function<std::unique_ptr<Work>()> then)
      : first_(std::move(first)), then_(std::move(then)) {}

  void wait() override {
    if (!second_) start_second();
    second_->wait();
  }
  bool test() override {
    if (!second_) {
      first_->test();
      return false;
    }
    return second_->test();
  }
  std::shared_ptr<const TimePoint> started() const override { return first_->started(); }
  std::shared_ptr<const TimePoint> finished() const override { return second_->finished(); }
  int source() const override { return first_->source(); }

 private:
  void start_second() {
    first_->wait();
    second_ = then_();
  }

  std::unique_ptr<Work> first_;
  std::function<std::unique_ptr<Work>()> then_;
  std::unique_ptr<Work> second_;
};

}  // namespace dtrain::dist::compression
