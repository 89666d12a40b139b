#include "dist/zero/flat_storage.h"

#include "common/error.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>

namespace dtrain::dist {

namespace {

// `flat`'s StorageImpl, which every tensor on its storage shares.
c10::StorageImpl* storage_of(const torch::Tensor& flat) {
  DTRAIN_CHECK(flat.dim() == 1 && flat.storage_offset() == 0,
               "flat storage: a tensor of {} dimension(s) at offset {} is not a flat buffer",
               flat.dim(), flat.storage_offset());
  return flat.storage().unsafeGetStorageImpl();
}

}  // namespace

void free_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = storage_of(flat);
  storage->set_data_ptr_noswap(at::DataPtr(nullptr, flat.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& flat) {
  c10::StorageImpl* storage = storage_of(flat);
  const size_t bytes = static_cast<size_t>(flat.numel()) * flat.element_size();
  DTRAIN_CHECK(storage->nbytes() == 0, "flat storage: allocated twice ({} bytes held)",
               storage->nbytes());
  const c10::DeviceGuard on_device(flat.device());
  at::Allocator* allocator = storage->allocator();
  if (allocator == nullptr) allocator = c10::GetAllocator(flat.device().type());
  storage->set_data_ptr_noswap(allocator->allocate(bytes));
  storage->set_nbytes(bytes);
}

}  // namespace dtrain::dist
