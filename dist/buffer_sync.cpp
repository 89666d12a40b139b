#include "dist/buffer_sync.h"

#include <map>

namespace dtrain::dist {

BufferSync::BufferSync(std::vector<torch::Tensor> buffers, std::shared_ptr<Communicator> comm,
                       BufferPolicy policy)
    : comm_(std::move(comm)), policy_(policy) {
  torch::NoGradGuard no_grad;
  std::map<torch::ScalarType, std::vector<torch::Tensor>> by_dtype;
  for (const torch::Tensor& buffer : buffers) by_dtype[buffer.scalar_type()].push_back(buffer);
  for (auto& [dtype, group] : by_dtype) {
    int64_t numel = 0;
    for (const torch::Tensor& buffer : group) numel += buffer.numel();
    torch::Tensor flat = torch::empty({numel}, group.front().options());
    int64_t offset = 0;
    for (torch::Tensor& buffer : group) {
      flat.narrow(0, offset, buffer.numel()).copy_(buffer.reshape({-1}));
      buffer.set_(flat.storage(), offset, buffer.sizes(), buffer.contiguous().strides());
      offset += buffer.numel();
    }
    flat_.push_back(flat);
  }
}

void BufferSync::sync(StepComm& record) {
  if (policy_ == BufferPolicy::kLocal) return;
  std::vector<std::pair<Collective, torch::Tensor>> issued;
  std::vector<std::unique_ptr<Work>> works;
  for (torch::Tensor& flat : flat_) {
    if (policy_ == BufferPolicy::kBroadcast) {
      works.push_back(comm_->broadcast(flat, 0));
      issued.emplace_back(Collective::kBroadcast, flat);
    } else if (flat.is_floating_point()) {
      works.push_back(comm_->all_reduce(flat, ReduceOp::kAverage));
      issued.emplace_back(Collective::kAllReduce, flat);
    }
  }
  for (size_t i = 0; i < works.size(); ++i) {
    works[i]->wait();
    const torch::Tensor& flat = issued[i].second;
    record.add(issued[i].first, Traffic::kSmall,
               flat.numel() * static_cast<int64_t>(flat.element_size()), std::move(works[i]));
  }
}

}  // namespace dtrain::dist
