// Host memory the process frees stays in the process for the next allocation of the step.
//
// LibTorch's CPU allocator is plain malloc. glibc serves blocks from 128 KiB up (a threshold
// that adapts) with fresh mmap'd pages and trims the heap when large blocks are freed, so each
// step page-faults its temporaries back in. On the 2-core CI machine an optimizer step over
// ResNet-50's 25.6 M parameters spent ~300 ms a list operation on that. LARS went from 225 to
// 35 ms and LAMB from 710 to 61 ms with blocks up to 32 MiB (glibc's cap on the threshold)
// kept on the heap and the heap left untrimmed (scripts/bench_optim.cpp, CPU). The cost is that
// the resident size stays at its peak, as with any caching allocator.
#pragma once

namespace dtrain {

// Call once at start-up, before the large allocations; no-op where malloc is not glibc's.
void keep_freed_host_memory();

}  // namespace dtrain
