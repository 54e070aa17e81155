// The process allocator's settings for a node holding many long-lived states.
#ifndef RINGLIMIT_STORAGE_ALLOCATOR_H_
#define RINGLIMIT_STORAGE_ALLOCATOR_H_

namespace ringlimit::storage {

// Fixes glibc's mmap and trim thresholds at their default values (128 KiB), which turns off their dynamic
// adjustment. By default, once a large block that was mmap'ed is freed (a shard's hash index outgrown),
// glibc raises both thresholds to its size, so the next, larger indexes come from the heap and, outgrown in
// turn, stay resident there as holes. ringlimitd's main and key_bytes_bench call it once at start: 1 M keys
// of a packing algorithm checked through a 2-thread ringlimitd took 105 B of RSS per key with the dynamic
// thresholds, 98 B with them fixed, where the states account for 95.5 (docs/storage.md "Memory per key").
// Returns false where the allocator does not take them (not glibc's, or a sanitizer's).
bool FixAllocatorThresholds();

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_ALLOCATOR_H_
