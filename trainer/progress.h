// The live progress line of rank 0: rewritten in place on a terminal, plain lines otherwise
// (and under mpirun); every line also goes to the run's log file.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain::trainer {

struct StepReport {
  int64_t step;         // steps completed
  int64_t total_steps;
  int64_t epoch;
  double loss;
  double lr;
  double img_per_s;
  double eta_s;
};

class Progress {
 public:
  // `enabled` is false on ranks other than 0.
  explicit Progress(bool enabled);
  void step(const StepReport& report);
  // A line that must stand on its own (epoch summary, warning): ends the live line first.
  void line(const std::string& text);
  // Ends the live line, if one is open, so that the next output starts on a line of its own.
  void end_line();

 private:
  bool enabled_;
  bool tty_;
  bool live_line_open_ = false;
};

std::string format_duration(double seconds);

}  // namespace dtrain::trainer
