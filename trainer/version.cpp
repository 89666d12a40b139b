#include "trainer/version.h"

#include "dist/comm/mpi_communicator.h"
#include "trainer/build_info.h"

#include <fmt/format.h>
#include <torch/version.h>
#ifdef DTRAIN_CUDA
#include <cuda_runtime_api.h>
#endif

namespace dtrain::trainer {

std::string dtrain_version() { return DTRAIN_VERSION; }

std::string version_report() {
#ifdef DTRAIN_CUDA
  const std::string cuda = fmt::format("CUDA {}.{} (built against)", CUDART_VERSION / 1000,
                                       CUDART_VERSION % 1000 / 10);
#else
  const std::string cuda = "CUDA no (this LibTorch has no CUDA)";
#endif
  const std::string nccl_version = DTRAIN_NCCL_VERSION;
  const std::string nccl = nccl_version.empty() ? "NCCL no (not built: CPU ranks use MPI)"
                                                : "NCCL " + nccl_version;
  return fmt::format("dtrain {}\nLibTorch {}\n{}\n{}\nMPI {}\n", DTRAIN_VERSION, TORCH_VERSION,
                     cuda, nccl, dist::mpi_library_version());
}

}  // namespace dtrain::trainer
