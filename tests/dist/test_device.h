// The device of the multi-rank tests: the CPU (the MPI backend), or this rank's GPU (NCCL)
// when DTRAIN_TEST_DEVICE=cuda, as the NCCL variants in tests/CMakeLists.txt set it.
#pragma once

#include "dist/comm/mpi_communicator.h"

#include <torch/torch.h>

#include <cstdlib>
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
