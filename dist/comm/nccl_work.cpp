#include "dist/comm/nccl_work.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <limits>

namespace dtrain::dist {

CudaEvent::CudaEvent(c10::DeviceIndex device, unsigned int flags)
    : timed_((flags & cudaEventDisableTiming) == 0) {
  c10::cuda::CUDAGuard guard(device);  // an event belongs to the device current at creation
  DTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event_, flags));
}

// Unchecked: CUDA releases a pending event once it completes, and at process exit the
// runtime may already be unloading.
CudaEvent::~CudaEvent() { cudaEventDestroy(event_); }

void CudaEvent::record(cudaStream_t stream) {
  DTRAIN_CUDA_CHECK(cudaEventRecord(event_, stream));
}

bool CudaEvent::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    // Not a failure, but CUDA keeps it as this thread's last error, which torch's next kernel
    // launch check would report: clear it.
    (void)cudaGetLastError();
    return false;
  }
  // The process is exiting: nothing remains to wait for.
  if (status == cudaErrorCudartUnloading) return true;
  DTRAIN_CUDA_CHECK(status);
  return true;
}

std::shared_ptr<CudaEventPool> CudaEventPool::create(c10::DeviceIndex device,
                                                     unsigned int flags) {
  return std::shared_ptr<CudaEventPool>(new CudaEventPool(device, flags));
}

std::shared_ptr<CudaEvent> CudaEventPool::acquire() {
  std::unique_ptr<CudaEvent> event;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_.empty()) {
      event = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!event) event = std::make_unique<CudaEvent>(device_, flags_);
  // The pool may be gone when the last holder lets go: the event is then destroyed.
  return std::shared_ptr<CudaEvent>(event.release(),
                                    [pool = weak_from_this()](CudaEvent* released) {
                                      if (auto alive = pool.lock()) {
                                        alive->release(released);
                                      } else {
                                        delete released;
                                      }
                                    });
}

void CudaEventPool::release(CudaEvent* event) {
  std::lock_guard<std::mutex> lock(mutex_);
  free_.emplace_back(event);
}

double CudaTimePoint::ms_until(const TimePoint& later) const {
  const auto* other = dynamic_cast<const CudaTimePoint*>(&later);
  DTRAIN_CHECK(other != nullptr, "ms_until: both time points must come from the NCCL backend");
  if (!event_->timed() || !other->event_->timed()) return std::numeric_limits<double>::quiet_NaN();
  DTRAIN_CUDA_CHECK(cudaEventSynchronize(event_->get()));
  DTRAIN_CUDA_CHECK(cudaEventSynchronize(other->event_->get()));
  float ms = 0.0f;
  DTRAIN_CUDA_CHECK(cudaEventElapsedTime(&ms, event_->get(), other->event_->get()));
  return ms;
}

void LaunchEvents::set(std::shared_ptr<CudaEvent> started, std::shared_ptr<CudaEvent> finished) {
  started_ = std::move(started);
  finished_ = std::move(finished);
  launched_.store(true, std::memory_order_release);  // publishes both to the watchdog
}

const std::shared_ptr<CudaEvent>& LaunchEvents::started() const {
  DTRAIN_CHECK(launched(), "started() of an operation not yet launched: call wait() first");
  return started_;
}

const std::shared_ptr<CudaEvent>& LaunchEvents::finished() const {
  DTRAIN_CHECK(launched(), "finished() of an operation not yet launched: call wait() first");
  return finished_;
}

void NcclWork::wait() {
  launch();
  // PyTorch's default stream is CUDA's null stream, which means the *current* device's.
  c10::cuda::CUDAGuard guard(device_);
  DTRAIN_CUDA_CHECK(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream(device_).stream(),
                                        events_->finished()->get(), 0));
}

bool NcclWork::test() {
  launch();
  return events_->done();
}

std::shared_ptr<const TimePoint> NcclWork::started() const {
  return std::make_shared<CudaTimePoint>(events_->started());
}

std::shared_ptr<const TimePoint> NcclWork::finished() const {
  return std::make_shared<CudaTimePoint>(events_->finished());
}

int NcclWork::source() const {
  DTRAIN_CHECK(source_.has_value(), "source() of an NCCL operation other than a receive");
  return *source_;
}

void NcclWork::launch() {
  if (launch_posted_ && !events_->launched()) launch_posted_();
}

}  // namespace dtrain::dist
