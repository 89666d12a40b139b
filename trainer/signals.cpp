#include "trainer/signals.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <utility>

#include <semaphore.h>
#include <unistd.h>

namespace dtrain::trainer {

namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGUSR1};
constexpr int kNumSignals = sizeof(kSignals) / sizeof(kSignals[0]);

std::atomic<int> g_received{0};
std::atomic<int> g_second{0};  // the SIGINT or SIGTERM after the first signal, or 0
std::atomic<bool> g_quit{false};  // StopSignals' waiter is to return
static_assert(std::atomic<int>::is_always_lock_free, "a handler may touch only lock-free atomics");
sem_t g_wake;  // posted for the waiter: sem_post is async-signal-safe, a condition variable not

extern "C" void record_signal(int signal) {
  int none = 0;
  if (g_received.compare_exchange_strong(none, signal) || signal == SIGUSR1) return;
  none = 0;
  if (g_second.compare_exchange_strong(none, signal)) {
    sem_post(&g_wake);
  } else {  // a third: what the waiter runs may be stuck
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
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
  // failing with EINTR.
  action.sa_flags = SA_RESTART;
  for (int i = 0; i < kNumSignals; ++i) {
    sigaction(kSignals[i], &action, previous ? &previous[i] : nullptr);
  }
}

}  // namespace

StopSignals::StopSignals(EndAtOnce end_at_once) : end_at_once_(std::move(end_at_once)) {
  g_received = 0;
  g_second = 0;
  g_quit = false;
  sem_init(&g_wake, 0, 0);
  waiter_ = std::thread([this] { wait_for_second(); });
  install(g_previous);
}

void StopSignals::reinstall() const { install(nullptr); }

StopSignals::~StopSignals() {
  for (int i = 0; i < kNumSignals; ++i) sigaction(kSignals[i], &g_previous[i], nullptr);
  g_quit = true;
  sem_post(&g_wake);
  waiter_.join();
  sem_destroy(&g_wake);
}

void StopSignals::wait_for_second() {
  while (sem_wait(&g_wake) != 0) {
  }  // EINTR: a signal handled on this thread
  if (!g_quit) end_at_once_(g_second.load());
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

std::vector<std::string> launch_command() {
  std::vector<std::string> words;
  if (const char* args = std::getenv("DTRAIN_LAUNCH_ARGS")) {
    std::istringstream lines(args);
    for (std::string word; std::getline(lines, word);) words.push_back(word);
    return words;
  }
  const std::string parent = fmt::format("/proc/{}", ::getppid());
  std::ifstream comm(parent + "/comm");
  std::string name;
  std::getline(comm, name);
  if (name != "mpirun" && name != "mpiexec" && name != "orterun" && name != "prterun") return {};
  std::ifstream cmdline(parent + "/cmdline", std::ios::binary);
  for (std::string word; std::getline(cmdline, word, '\0');) words.push_back(word);
  return words;
}

std::string resume_command(const std::vector<std::string>& command, int world_size,
                           const std::vector<std::string>& launch) {
  // The launcher's words before the trainer's arguments, where its command line ends in them.
  const size_t args = command.empty() ? 0 : command.size() - 1;
  const bool launched_so = launch.size() > args &&
                           std::equal(command.begin() + (command.empty() ? 0 : 1), command.end(),
                                      launch.end() - static_cast<std::ptrdiff_t>(args));
  std::string line;
  size_t first = 0;
  if (launched_so) {
    for (size_t i = 0; i < launch.size() - args; ++i) {
      line += (line.empty() ? "" : " ") + shell_quote(launch[i]);
    }
    first = 1;  // the launcher's words name the program
  } else if (world_size > 1) {
    const char* launcher = std::getenv("DTRAIN_LAUNCHER");
    line = fmt::format("{} -np {}", launcher ? launcher : "mpirun", world_size);
  }
  for (size_t i = first; i < command.size(); ++i) {
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
