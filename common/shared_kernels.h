// Kernels that share the GPU with communication in flight. cuDNN's persistent BatchNorm
// kernels start only when every SM is free: while an all-reduce's NCCL kernel holds some, the
// compute stream idles until the all-reduce ends (docs/PERFORMANCE.md, "What overlap cannot
// hide"). ATen's BatchNorm kernels run beside it. A strategy that has just launched
// communication from a gradient hook asks that the next few such backwards take kernels that
// share the GPU; the layers take the requests as they run.
//
// Both sides run on autograd's thread for the device, in backward order, which is the same
// every step for a model: a CUDA graph captures the same choices for every replay.
//
// Communication that stands on the GPU for as long as its peers take (receives posted a step
// ahead, as the parameter server's p2p transport posts them) needs more: a persistent kernel
// waiting for its SMs would wait for the peers' next sends, which wait for this rank's step,
// which waits for the persistent kernel. While such communication is on, every layer takes
// its GPU-sharing kernels, forward and backward.
#pragma once

namespace dtrain {

// Standing communication on the GPU from now on (true) or no longer (false).
void set_standing_communication(bool on);
// Whether layers must take their GPU-sharing kernels everywhere.
bool standing_communication();

// The next `layers` backwards of layers that have a GPU-sharing kernel take it (added to the
// requests left).
void request_shared_kernels(int layers);
// Drops the requests left (a new backward starts).
void clear_shared_kernel_requests();
// Whether this layer's backward takes its GPU-sharing kernel; takes one request.
bool take_shared_kernel_request();

}  // namespace dtrain
