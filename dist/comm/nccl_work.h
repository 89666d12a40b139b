// The NCCL backend's view of time and completion: CUDA events, the TimePoint and Work built on
// them. Private to dist/comm/nccl_*.cpp (it includes the CUDA runtime's header).
#pragma once

#include "common/error.h"
#include "dist/comm/communicator.h"

#include <c10/core/Device.h>
#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#define DTRAIN_CUDA_CHECK(call)                                                    \
  do {                                                                             \
    const cudaError_t cuda_status = (call);                                        \
    DTRAIN_CHECK(cuda_status == cudaSuccess, "{} failed: {}", #call,               \
                 cudaGetErrorString(cuda_status));                                 \
  } while (0)

namespace dtrain::dist {

// A CUDA event on one device. Shared: a Work, its TimePoints and the watchdog each hold it for
// as long as they need it.
class CudaEvent {
 public:
  CudaEvent(c10::DeviceIndex device, unsigned int flags);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  // Created with timing (cudaEventDefault rather than cudaEventDisableTiming).
  bool timed() const { return timed_; }
  void record(cudaStream_t stream);
  // Whether the work before the latest record has completed; never blocks.
  bool query() const;

 private:
  cudaEvent_t event_ = nullptr;
  bool timed_;
};

// Events recycled between operations. Creating and destroying the two events of a collective
// cost more host time than a 1 MiB all-reduce over NVLink takes on the device. An event goes
// back to the pool when its last holder (a Work, a TimePoint, the watchdog) lets it go, so a
// record still needed is never overwritten. Thread-safe: the watchdog drops its holds on its
// own thread.
class CudaEventPool : public std::enable_shared_from_this<CudaEventPool> {
 public:
  static std::shared_ptr<CudaEventPool> create(c10::DeviceIndex device, unsigned int flags);
  std::shared_ptr<CudaEvent> acquire();

 private:
  CudaEventPool(c10::DeviceIndex device, unsigned int flags) : device_(device), flags_(flags) {}
  void release(CudaEvent* event);

  c10::DeviceIndex device_;
  unsigned int flags_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CudaEvent>> free_;
};

class CudaTimePoint : public TimePoint {
 public:
  explicit CudaTimePoint(std::shared_ptr<CudaEvent> event) : event_(std::move(event)) {}
  // Blocks until both events have happened; both must be on one device. NaN unless both
  // events are timed.
  double ms_until(const TimePoint& later) const override;

 private:
  std::shared_ptr<CudaEvent> event_;
};

// The events of one operation, set once when it is launched: at once for collectives, at the
// first wait for sends and receives. The caller's thread sets and reads them; the watchdog
// polls them from its own.
class LaunchEvents {
 public:
  void set(std::shared_ptr<CudaEvent> started, std::shared_ptr<CudaEvent> finished);
  bool launched() const { return launched_.load(std::memory_order_acquire); }
  bool done() const { return launched() && finished_->query(); }
  // Its stream has reached it: its kernel runs (or has run).
  bool has_started() const { return launched() && started_->query(); }
  // Checked: only a launched operation has them.
  const std::shared_ptr<CudaEvent>& started() const;
  const std::shared_ptr<CudaEvent>& finished() const;

 private:
  std::shared_ptr<CudaEvent> started_;
  std::shared_ptr<CudaEvent> finished_;
  std::atomic<bool> launched_{false};
};

class NcclWork : public Work {
 public:
  // `launch_posted` launches the operation if it still waits among posted sends and receives;
  // empty for collectives, launched when issued. `source`: a receive's peer; none otherwise.
  NcclWork(std::shared_ptr<LaunchEvents> events, c10::DeviceIndex device,
           std::function<void()> launch_posted, std::optional<int> source)
      : events_(std::move(events)),
        device_(device),
        launch_posted_(std::move(launch_posted)),
        source_(source) {}

  // The current stream of the device waits for the operation; the host does not.
  void wait() override;
  bool test() override;
  std::shared_ptr<const TimePoint> started() const override;
  std::shared_ptr<const TimePoint> finished() const override;
  int source() const override;

 private:
  void launch();

  std::shared_ptr<LaunchEvents> events_;
  c10::DeviceIndex device_;
  std::function<void()> launch_posted_;
  std::optional<int> source_;
};

}  // namespace dtrain::dist
