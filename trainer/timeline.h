// The run's timeline (run.trace): what each rank spent each step on, as Chrome trace events
// that Perfetto (ui.perfetto.dev) or chrome://tracing open. Host phases (data wait, forward,
// backward, straggler pause, optimizer step, checkpoint) on one track per rank, the
// strategy's communication (each bucket's collective from its start to its end) on a second,
// so overlap with backward shows. Each rank writes timeline.rankN.json; rank 0 then merges
// them into timeline.json.
// On GPUs the communication spans are on the device's clock, placed from the step's start:
// exact in duration and relative order, approximate in alignment with the host phases (the
// host runs ahead); reading them waits for the device every step, so tracing slows a GPU run.
#pragma once

#include "dist/strategy.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::trainer {

class Timeline {
 public:
  // Disabled: every call does nothing. `dir`: the run directory.
  Timeline(bool enabled, std::string dir, int rank);

  // A host phase, from construction to destruction.
  class Phase {
   public:
    Phase(Timeline& timeline, const char* name);
    ~Phase();
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    Timeline& timeline_;
    const char* name_;
    double start_us_;
  };

  // After a step: its communication spans, counted from the end of the step before.
  void add_step_spans(const std::vector<dist::Span>& spans);
  // Writes this rank's events to timeline.rankN.json.
  void write() const;
  // Once every rank has written: timeline.json with the events of every timeline.rankN.json
  // in `dir`.
  static void merge(const std::string& dir);

  bool enabled() const { return enabled_; }

 private:
  struct Event {
    std::string name;
    double start_us, duration_us;
    int track;  // 0: host, 1: communication
  };
  double now_us() const;

  bool enabled_;
  std::string dir_;
  int rank_;
  double step_origin_us_ = 0.0;
  std::vector<Event> events_;
};

}  // namespace dtrain::trainer
