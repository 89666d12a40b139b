// A flat tensor whose memory comes and goes while the tensor, and every tensor on its
// storage, stays: ZeRO-3 holds a unit's whole parameters only while the unit runs, yet the
// parameters (views of the unit's flat tensor; autograd saves convolution's and BatchNorm's
// as themselves) and the views computed from them in forward (Linear's weight.t(), saved for
// backward) must find the gathered values again at backward. Freeing the storage's memory
// instead of replacing the storage keeps every alias on it, as FSDP resizes its flat
// parameter's storage to zero bytes between uses.
//
// On CUDA the memory comes from the caching allocator on the current stream (the compute
// stream: the forward's, which autograd makes current again for each node of the backward).
// Freeing it is safe while kernels already issued still read or write it: the compute
// stream's own later work is ordered after them, and a collective that used it on the NCCL
// stream recorded that stream on the memory (dist/comm/nccl_communicator.h, step 3), so the
// allocator hands it out again only once that stream has passed the free.
#pragma once

#include <torch/torch.h>

namespace dtrain::dist {

// Frees the memory of `flat`'s storage: it then holds no bytes, and no tensor on it may be read
// or written until allocate_storage(). `flat`: contiguous, at storage offset 0, covering the
// whole storage.
void free_storage(const torch::Tensor& flat);
// Gives `flat`'s storage fresh memory for every element of `flat`, uninitialised, on `flat`'s
// device whichever device is current (the CUDA allocator serves the current one).
void allocate_storage(const torch::Tensor& flat);

}  // namespace dtrain::dist
