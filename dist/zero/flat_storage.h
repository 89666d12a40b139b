// A flat tensor whose memory comes and goes while the tensor, and every tensor on its
// storage, stays: ZeRO-3 holds a unit's whole parameters only while the unit runs, yet the
// parameters (views of the unit's flat tensor; autograd saves convolution's and BatchNorm's
// as themselves) and the views computed from them in forward (Linear's weight.t(), saved for
// backward) must find the gathered values again at backward. Freeing the storage's memory
// instead of replacing the storage keeps every alias on it, as FSDP resizes its flat
// parameter's storage to zero bytes between uses.
#pragma once

#include <torch/torch.h>

namespace dtrain::dist {

// Frees the memory of `flat`'s storage: it then holds no bytes, and no tensor on it may be read
// or written until allocate_storage(). `flat`: contiguous, at storage offset 0, covering the
// whole storage.
void free_storage(const torch::Tensor& flat);
// Gives `flat`'s storage fresh memory for every element of `flat`, uninitialised.
void allocate_storage(const torch::Tensor& flat);

}  // namespace dtrain::dist
