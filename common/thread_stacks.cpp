#include "common/thread_stacks.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dlfcn.h>
#include <execinfo.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain {

namespace {

constexpr int kMaxFrames = 48;

struct Capture {
  pid_t tid = 0;
  std::atomic<bool> done{false};
  int depth = 0;
  void* frames[kMaxFrames] = {};
};

// The captures of the dump in progress, read by the handler (one dump at a time).
std::atomic<Capture*> g_captures{nullptr};
std::atomic<size_t> g_count{0};

pid_t this_tid() { return static_cast<pid_t>(syscall(SYS_gettid)); }

void record_stack(int /*signal*/) {
  Capture* captures = g_captures.load();
  const size_t count = g_count.load();
  const pid_t tid = this_tid();
  for (size_t i = 0; captures != nullptr && i < count; ++i) {
    if (captures[i].tid == tid) {
      captures[i].depth = backtrace(captures[i].frames, kMaxFrames);
      captures[i].done.store(true);
      return;
    }
  }
}

std::vector<pid_t> thread_ids() {
  std::vector<pid_t> ids;
  if (DIR* dir = opendir("/proc/self/task")) {
    while (const dirent* entry = readdir(dir)) {
      const int id = std::atoi(entry->d_name);
      if (id > 0) ids.push_back(static_cast<pid_t>(id));
    }
    closedir(dir);
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::string thread_name(pid_t tid) {
  std::ifstream file(fmt::format("/proc/self/task/{}/comm", tid));
  std::string name;
  std::getline(file, name);
  return name;
}

std::string describe_frame(void* address) {
  Dl_info info{};
  if (dladdr(address, &info) == 0 || info.dli_fname == nullptr) return fmt::format("{}", address);
  std::string library = info.dli_fname;
  library = library.substr(library.find_last_of('/') + 1);
  if (info.dli_sname == nullptr) {
    return fmt::format("{}+{:#x}", library,
                       reinterpret_cast<uintptr_t>(address) -
                           reinterpret_cast<uintptr_t>(info.dli_fbase));
  }
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> demangled(
      abi::__cxa_demangle(info.dli_sname, nullptr, nullptr, &status), &std::free);
  const std::string symbol = status == 0 && demangled ? demangled.get() : info.dli_sname;
  return fmt::format("{} ({}+{:#x})", symbol.substr(0, 160), library,
                     reinterpret_cast<uintptr_t>(address) -
                         reinterpret_cast<uintptr_t>(info.dli_saddr));
}

}  // namespace

std::string thread_stacks(std::chrono::milliseconds wait) {
  static std::mutex one_at_a_time;
  std::lock_guard<std::mutex> lock(one_at_a_time);
  void* warm[1];
  backtrace(warm, 1);  // loads the unwinder before any handler needs it

  const std::vector<pid_t> ids = thread_ids();
  auto captures = std::make_unique<Capture[]>(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) captures[i].tid = ids[i];
  g_count.store(ids.size());
  g_captures.store(captures.get());

  // Installed for good: a thread that answers after the wait must not meet the signal's
  // default action, which ends the process.
  const int signal = SIGRTMIN + 4;
  static std::once_flag installed;
  std::call_once(installed, [signal] {
    struct sigaction action {};
    action.sa_handler = record_stack;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    sigaction(signal, &action, nullptr);
  });
  const pid_t me = this_tid();
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == me) {
      record_stack(signal);
    } else {
      syscall(SYS_tgkill, getpid(), ids[i], signal);
    }
  }
  const auto deadline = std::chrono::steady_clock::now() + wait;
  const auto all_done = [&] {
    for (size_t i = 0; i < ids.size(); ++i) {
      if (!captures[i].done.load()) return false;
    }
    return true;
  };
  while (!all_done() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  // Late answers write into captures that stay alive (leaked) rather than freed memory.
  g_captures.store(nullptr);

  std::string out = fmt::format("stacks of the {} threads of process {}:\n", ids.size(), getpid());
  for (size_t i = 0; i < ids.size(); ++i) {
    const Capture& capture = captures[i];
    out += fmt::format("thread {} \"{}\"{}\n", capture.tid, thread_name(capture.tid),
                       capture.tid == me ? " (this one)" : "");
    if (!capture.done.load()) {
      out += "  (no answer)\n";
      continue;
    }
    for (int f = 0; f < capture.depth; ++f) {
      out += fmt::format("  #{} {}\n", f, describe_frame(capture.frames[f]));
    }
  }
  if (!all_done()) captures.release();
  return out;
}

}  // namespace dtrain
