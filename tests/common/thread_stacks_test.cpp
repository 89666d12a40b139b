// common/thread_stacks.h: every thread of the process is listed with where it is, a thread
// blocked in a wait included, and the process goes on afterwards (a second dump works too).
#include "common/thread_stacks.h"

#include <catch2/catch.hpp>
#include <pthread.h>

#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

TEST_CASE("thread stacks: each thread, a blocked one included, with its frames", "[common]") {
  std::mutex mutex;
  std::condition_variable wake;
  bool named = false, stop = false;
  std::thread blocked([&] {
    pthread_setname_np(pthread_self(), "stack-probe");
    std::unique_lock<std::mutex> lock(mutex);
    named = true;
    wake.notify_all();
    wake.wait(lock, [&] { return stop; });
  });
  {
    std::unique_lock<std::mutex> lock(mutex);
    wake.wait(lock, [&] { return named; });
  }

  for (int dump = 0; dump < 2; ++dump) {
    const std::string stacks = dtrain::thread_stacks();
    INFO(stacks);
    CHECK(stacks.find("(this one)") != std::string::npos);
    const size_t probe = stacks.find("\"stack-probe\"");
    REQUIRE(probe != std::string::npos);
    const size_t next = stacks.find("\nthread ", probe);
    const std::string section = stacks.substr(probe, next == std::string::npos ? std::string::npos
                                                                               : next - probe);
    CHECK(section.find("(no answer)") == std::string::npos);
    CHECK(section.find("#2 ") != std::string::npos);          // a few frames deep
    CHECK(section.find("pthread_cond") != std::string::npos);  // inside its wait
  }

  {
    std::lock_guard<std::mutex> lock(mutex);
    stop = true;
  }
  wake.notify_all();
  blocked.join();
}
