#include "dist/comm/shared_regions.h"

#include "common/error.h"
#include "common/log.h"
#include "dist/comm/gather.h"
#if DTRAIN_CUDA
#include "dist/comm/cuda_ipc.h"
#endif

#include <fmt/format.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace dtrain::dist {

namespace {

// The host backend: one POSIX shared-memory object per rank, named after a token rank 0 draws
// (so that jobs on one machine never meet), mapped by every rank of the node. The names are
// unlinked once every rank has mapped every object: the memory lives while it is mapped, and
// nothing is left behind in /dev/shm should the job die.
class HostSharedRegions : public SharedRegions {
 public:
  HostSharedRegions(Communicator& comm, int64_t bytes) : bytes_(bytes) {
    DTRAIN_CHECK(bytes > 0, "shared regions need a positive size, got {} bytes", bytes);
    std::string token;
    if (comm.rank() == 0) {
      std::random_device random;
      token = fmt::format("{:08x}{:08x}", random(), random());
    }
    token = all_gather_bytes(comm, token)[0];
    const auto name = [&token](int rank) { return fmt::format("/dtrain-{}-{}", token, rank); };

    mapped_.assign(static_cast<size_t>(comm.size()), nullptr);
    const std::string own = name(comm.rank());
    const int fd = shm_open(own.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    DTRAIN_CHECK(fd >= 0, "shm_open {}: {}", own, std::strerror(errno));
    const bool sized = ftruncate(fd, static_cast<off_t>(bytes)) == 0;  // zero-filled
    const int size_errno = errno;
    close(fd);
    if (!sized) shm_unlink(own.c_str());
    DTRAIN_CHECK(sized, "sizing {} to {} bytes: {} (is /dev/shm large enough?)", own, bytes,
                 std::strerror(size_errno));
    comm.barrier();  // every object exists
    for (int r = 0; r < comm.size(); ++r) mapped_[static_cast<size_t>(r)] = map(name(r));
    comm.barrier();  // every rank has mapped every object: the names can go
    shm_unlink(own.c_str());
  }

  ~HostSharedRegions() override {
    for (void* region : mapped_) {
      if (region != nullptr) munmap(region, static_cast<size_t>(bytes_));
    }
  }

  int64_t bytes() const override { return bytes_; }

  torch::Tensor region(int rank) const override {
    DTRAIN_CHECK(rank >= 0 && rank < static_cast<int>(mapped_.size()),
                 "shared regions: rank {} of {}", rank, mapped_.size());
    return torch::from_blob(mapped_[static_cast<size_t>(rank)], {bytes_}, torch::kUInt8);
  }

  void copy(void* dst, const void* src, int64_t bytes) const override {
    std::memcpy(dst, src, static_cast<size_t>(bytes));
  }

 private:
  void* map(const std::string& name) const {
    const int fd = shm_open(name.c_str(), O_RDWR, 0);
    DTRAIN_CHECK(fd >= 0, "shm_open {}: {}", name, std::strerror(errno));
    void* region =
        mmap(nullptr, static_cast<size_t>(bytes_), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int map_errno = errno;
    close(fd);
    DTRAIN_CHECK(region != MAP_FAILED, "mmap {}: {}", name, std::strerror(map_errno));
    return region;
  }

  int64_t bytes_;
  std::vector<void*> mapped_;  // by rank
};

}  // namespace

std::unique_ptr<SharedRegions> make_shared_regions(Communicator& comm, int64_t bytes) {
  if (comm.device().is_cpu()) return std::make_unique<HostSharedRegions>(comm, bytes);
#if DTRAIN_CUDA
  if (comm.device().is_cuda()) return std::make_unique<DeviceSharedRegions>(comm, bytes);
#endif
  throw UserError(fmt::format("shared regions: no backend for device {}", comm.device().str()));
}

std::unique_ptr<SharedRegions> make_host_shared_regions(Communicator& comm, int64_t bytes) {
  return std::make_unique<HostSharedRegions>(comm, bytes);
}

}  // namespace dtrain::dist
