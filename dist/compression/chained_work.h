// A Work of two operations where the second needs the first's result (PowerSGD's P round,
// then its Q round): wait() waits for the first, runs `then` to start the second, and waits
// for it. Timed from the first's start to the second's end.
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
    if (!second_) {
      first_->wait();
      second_ = then_();
    }
    second_->wait();
  }
  // Never complete before wait() started the second; polling the first progresses it on MPI.
  bool test() override {
    if (second_) return second_->test();
    first_->test();
    return false;
  }
  std::shared_ptr<const TimePoint> started() const override { return first_->started(); }
  std::shared_ptr<const TimePoint> finished() const override { return second_->finished(); }
  int source() const override { return first_->source(); }

 private:
  std::unique_ptr<Work> first_;
  std::function<std::unique_ptr<Work>()> then_;
  std::unique_ptr<Work> second_;
};

}  // namespace dtrain::dist::compression
