#include "common/host_memory.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace dtrain {

void keep_freed_host_memory() {
#ifdef __GLIBC__
  constexpr int kLargestHeapBlock = 32 << 20;  // glibc's maximum mmap threshold on 64-bit
  mallopt(M_MMAP_THRESHOLD, kLargestHeapBlock);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

}  // namespace dtrain
