#include "dist/comm/communicator.h"
#include "dist/comm/mpi_communicator.h"

#include "common/error.h"

#ifdef DTRAIN_NCCL
#include "dist/comm/nccl_communicator.h"
#endif

namespace dtrain::dist {

std::unique_ptr<Communicator> make_world_communicator(torch::Device device, double timeout_s) {
  return make_device_communicator(device, timeout_s, init_world().size);
}

std::unique_ptr<Communicator> make_device_communicator(torch::Device device, double timeout_s,
                                                       int num_ranks) {
  if (device.is_cpu()) return make_mpi_first_ranks(num_ranks, timeout_s);
#ifdef DTRAIN_NCCL
  return make_nccl_first_ranks(device.has_index() ? device.index() : 0, timeout_s, num_ranks);
#else
  throw UserError("collectives on " + device.str() +
                  " need NCCL, and this build has none (built without CUDA LibTorch or without "
                  "nccl.h); use run.device = \"cpu\"");
#endif
}

}  // namespace dtrain::dist
