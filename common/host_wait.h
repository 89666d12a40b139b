// Waiting on the host for a GPU's work without holding the CUDA driver's locks.
//
// A copy into pageable host memory (Tensor::cpu(), item()) blocks inside the driver until its
// stream reaches it, and meanwhile holds a lock that every other thread's cudaMemcpyAsync of
// the process needs (seen on 2 x H200: the parameter server's link copies stood still behind
// a report's read). Where that stream waits for a collective that needs a peer, and the peer
// waits for this rank's link copies, that is a deadlock. These wait by polling an event
// instead, which holds nothing, and copy only once the values are there.
#pragma once

#include <torch/types.h>

namespace dtrain {

// Returns once the work issued so far to the current stream of `device` has run (CPU: at once).
void wait_for_stream(torch::Device device);

// `tensor` on the host, read once its stream has reached it (a CPU tensor as it is).
torch::Tensor to_host(const torch::Tensor& tensor);

}  // namespace dtrain
