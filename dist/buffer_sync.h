// Keeps a model's buffers (BatchNorm running statistics) consistent over the ranks of a
// data-parallel strategy. The buffers are moved into one flat tensor per dtype at
// construction (Tensor::set_ onto the flat storage: the module updates them in place there),
// so each sync is one collective per dtype, without copies.
#pragma once

#include "dist/comm/communicator.h"
#include "dist/step_comm.h"

#include <memory>
#include <vector>

namespace dtrain::dist {

enum class BufferPolicy {
  kBroadcast,  // rank 0's, before every forward and evaluation (PyTorch DDP's default)
  kAverage,    // the ranks' mean (floating buffers; counters agree anyway)
  kLocal,      // each rank keeps its own
};

class BufferSync {
 public:
  BufferSync(std::vector<torch::Tensor> buffers, std::shared_ptr<Communicator> comm,
             BufferPolicy policy);

  // Blocking; the collectives go into `record`.
  void sync(StepComm& record);

 private:
  std::shared_ptr<Communicator> comm_;
  BufferPolicy policy_;
  std::vector<torch::Tensor> flat_;  // one per dtype
};

}  // namespace dtrain::dist
