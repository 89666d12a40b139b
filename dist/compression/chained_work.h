// A Work of two operations where the second needs the first's result (PowerSGD's P round,
// then its Q round): the second starts (`then`) when a test() finds the first complete (the
// reducer's polls from the gradient hooks on MPI, so it overlaps the rest of backward) or
// else in wait(), which then waits for it. Timed from the first's start to the second's end.
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
      if (!first_->test()) return false;
      start_second();
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
