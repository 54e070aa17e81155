#include "storage/allocator.h"

#include <cstdlib>  // (defines __GLIBC__ with glibc)

#ifdef __GLIBC__
#include <malloc.h>
#endif

namespace ringlimit::storage {

bool FixAllocatorThresholds() {
#ifdef __GLIBC__
  constexpr int kThreshold = 128 * 1024;  // glibc's default for both
  const bool mmap = mallopt(M_MMAP_THRESHOLD, kThreshold) == 1;
  const bool trim = mallopt(M_TRIM_THRESHOLD, kThreshold) == 1;
  return mmap && trim;
#else
  return false;
#endif
}

}  // namespace ringlimit::storage
