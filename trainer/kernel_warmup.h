// Every kernel of training and evaluation launched once, before the parameter server's
// point-to-point links post anything (dist.ps.transport = "p2p" on GPUs, dist/ps/peer.h).
// There, receives wait on the device for peers all through a run. A kernel launched for the
// first time makes CUDA load it, or makes cuDNN and cuBLAS set up what it needs, and that can
// wait for all the GPU's work to finish, a receive included; two ranks doing so at once, each
// waiting for the other's next push, deadlock. CUDA_MODULE_LOADING=EAGER (set by the trainer)
// loads the libraries' kernels at start; this loads the rest: cuDNN's engines, the algorithms
// cuDNN's benchmark picks for each shape, cuBLAS's handles and workspaces.
#pragma once

#include "models/model.h"
#include "trainer/options.h"

#include <torch/torch.h>

#include <cstdint>
#include <vector>

namespace dtrain::trainer {

// A training step's forward and backward on a micro-batch of zeros (config's batch size,
// precision and memory format), and an evaluation forward at each of `eval_batches` sizes;
// the model's parameters, buffers and gradients are left as they were.
void warm_up_kernels(models::Model& model, const Config& config, std::vector<int64_t> image_shape,
                     const std::vector<int64_t>& eval_batches, torch::Device device);

}  // namespace dtrain::trainer
