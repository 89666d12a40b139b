#include "trainer/signals.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace dtrain::trainer {

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);

std::atomic<int> g_received{0};
static_assert(std::atomic<int>::is_always_lock_free, "a handler may touch only lock-free atomics");

extern "C" void record_signal(int signal) {
  int none = 0;
  g_received.compare_exchange_strong(none, signal);
}

struct sigaction g_previous[kNumSignals];

// Arguments a shell takes as they are; anything else is single-quoted.
std::string shell_quote(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789_-./=:,+@%") == std::string::npos;
  if (plain) return arg;
  std::string quoted = "'";
  for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

// previous: where to keep the handlers replaced, or null.
void install(struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = record_signal;
  sigemptyset(&action.sa_mask);
  // SA_RESTART: system calls the signal interrupts (reads, MPI's polls) resume instead of
  // failing with EINTR. SA_RESETHAND: a second SIGINT or SIGTERM ends the process. Not so a
  // second SIGUSR1, which asks for nothing more: scripts/mpirun.sh sends it to the ranks of
  // its machine itself as well as through mpirun, which does not always pass it on.
  for (int i = 0; i < kNumSignals; ++i) {
    action.sa_flags = SA_RESTART | (kSignals[i] == SIGUSR1 ? 0 : SA_RESETHAND);
    sigaction(kSignals[i], &action, previous ? &previous[i] : nullptr);
  }
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  install(g_previous);
}

void StopSignals::reinstall() const {
  // A second SIGINT or SIGTERM already taken keeps its default action (SA_RESETHAND).
  if (received() == 0) install(nullptr);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
}

int StopSignals::received() { return g_received.load(); }

const std::vector<int>& stop_signals() {
  static const std::vector<int> signals(std::begin(kSignals), std::end(kSignals));
  return signals;
}

int asked_signal(int received) {
  const char* file = std::getenv("DTRAIN_STOP_SIGNAL_FILE");
  if (received != SIGUSR1 || file == nullptr) return received;
  std::ifstream in(file);
  int asked = 0;
  return in >> asked && asked > 0 && asked < NSIG ? asked : received;
}

int stop_exit_code(int signal) { return 128 + signal; }

std::string signal_name(int signal) {
  switch (signal) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    default: return fmt::format("signal {}", signal);
  }
}

std::string resume_command(const std::vector<std::string>& command, int world_size) {
  const char* launcher = std::getenv("DTRAIN_LAUNCHER");
  std::string line =
      world_size > 1 ? fmt::format("{} -np {}", launcher ? launcher : "mpirun", world_size) : "";
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& arg = command[i];
    if (arg.rfind("--resume=", 0) == 0) continue;
    if (arg == "--resume") {
      // Its optional value: the next argument unless that is an option.
      if (i + 1 < command.size() && command[i + 1].rfind('-', 0) != 0) ++i;
      continue;
    }
    line += (line.empty() ? "" : " ") + shell_quote(arg);
  }
  return line + " --resume";
}

}  // namespace dtrain::trainer
