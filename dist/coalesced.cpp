#include "dist/coalesced.h"

#include <functional>
#include <map>

namespace dtrain::dist {

namespace {

using Collective = std::function<std::unique_ptr<Work>(torch::Tensor flat)>;

// Per dtype: flatten into one buffer, run `collective` on it, copy the result back.
std::vector<std::unique_ptr<Work>> per_dtype(const std::vector<torch::Tensor>& tensors,
                                             const Collective& collective) {
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& tensor : tensors) by_dtype[tensor.scalar_type()].push_back(tensor);
  std::vector<std::unique_ptr<Work>> works;
  torch::NoGradGuard no_grad;
  for (auto& [dtype, group] : by_dtype) {
    std::vector<torch::Tensor> flat_views;
    for (const torch::Tensor& tensor : group) flat_views.push_back(tensor.reshape({-1}));
    torch::Tensor flat = torch::cat(flat_views);
    works.push_back(collective(flat));
    works.back()->wait();
    int64_t offset = 0;
    for (torch::Tensor& tensor : group) {
      tensor.copy_(flat.narrow(0, offset, tensor.numel()).view(tensor.sizes()));
      offset += tensor.numel();
    }
  }
  return works;
}

}  // namespace

std::vector<std::unique_ptr<Work>> broadcast_coalesced(Communicator& comm,
                                                       const std::vector<torch::Tensor>& tensors,
                                                       int root) {
  return per_dtype(tensors, [&](torch::Tensor flat) { return comm.broadcast(flat, root); });
}

}  // namespace dtrain::dist
