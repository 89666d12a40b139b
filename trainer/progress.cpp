#include "trainer/progress.h"

#include "common/log.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

namespace dtrain::trainer {

namespace {

// A live line needs a terminal. Under mpirun a rank's stdout is Open MPI's forwarding pseudo-
// terminal whether or not mpirun's own output is one (a redirected job log would fill with
// carriage returns), so ranks launched by MPI print plain lines.
bool live_terminal() {
  const bool launched_by_mpi = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr ||
                               std::getenv("PMIX_RANK") != nullptr ||
                               std::getenv("PMI_RANK") != nullptr;
  return !launched_by_mpi && isatty(fileno(stdout)) != 0;
}

}  // namespace

Progress::Progress(bool enabled) : enabled_(enabled), tty_(live_terminal()) {}

void Progress::step(const StepReport& r) {
  if (!enabled_) return;
  const std::string text =
      fmt::format("step {:>{}}/{} | epoch {} | loss {:.4f} | lr {:.3e} | {:.0f} img/s | eta {}",
                  r.step, std::to_string(r.total_steps).size(), r.total_steps, r.epoch, r.loss,
                  r.lr, r.img_per_s, format_duration(r.eta_s));
  log::to_file(text);
  if (tty_) {
    std::printf("\r%s\033[K", text.c_str());
    live_line_open_ = true;
  } else {
    std::printf("%s\n", text.c_str());
  }
  std::fflush(stdout);
}

void Progress::line(const std::string& text) {
  if (!enabled_) return;
  end_line();
  log::to_file(text);
  std::printf("%s\n", text.c_str());
  std::fflush(stdout);
}

void Progress::end_line() {
  if (live_line_open_) std::printf("\n");
  live_line_open_ = false;
}

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600) return fmt::format("{}h{:02d}m", s / 3600, (s % 3600) / 60);
  if (s >= 60) return fmt::format("{}m{:02d}s", s / 60, s % 60);
  return fmt::format("{}s", s);
}

}  // namespace dtrain::trainer
