// The device of the multi-rank tests: the CPU (the MPI backend), or this rank's GPU (NCCL)
// when DTRAIN_TEST_DEVICE=cuda, as the NCCL variants in tests/CMakeLists.txt set it.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/comm/mpi_communicator.h"

#include <torch/torch.h>

#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>

inline torch::Device test_device() {
  const char* requested = std::getenv("DTRAIN_TEST_DEVICE");
  const std::string device = requested ? requested : "cpu";
  if (device == "cpu") return torch::kCPU;
  if (device != "cuda") {
    throw std::invalid_argument("DTRAIN_TEST_DEVICE must be cpu or cuda, got " + device);
  }
  // One GPU per rank of this machine, as the trainer binds them.
  return {torch::kCUDA, static_cast<c10::DeviceIndex>(dtrain::dist::init_world().local_rank)};
}

// The world's communicator on test_device(), shared by the multi-rank tests of one binary (made
// once, on first use; 60 s timeout so that a broken test ends instead of hanging).
inline std::shared_ptr<dtrain::dist::Communicator> device_world() {
  static std::shared_ptr<dtrain::dist::Communicator> communicator =
      dtrain::dist::make_world_communicator(test_device(), 60.0);
  return communicator;
}
