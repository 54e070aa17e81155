// StateStore: where the limiter states of every (entity key, limit name) pair live.
//
// This is the seam between the node (which decides) and storage (which keeps). The node only ever
// calls this interface, so the memory tier, RocksDB write-back and replication hooks can be added
// behind it without touching the HTTP layer.
//
// Thread safety: every method is safe for concurrent use from many threads without external
// synchronisation. Calls on the same entity are serialised (Update is atomic per entity); calls on
// different entities proceed in parallel (states are sharded by the hash of the entity key, and all
// limits of one entity live in the same shard).
#ifndef RINGLIMIT_STORAGE_STATE_STORE_H_
#define RINGLIMIT_STORAGE_STATE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "limiter/limiter.h"
#include "limiter/merge.h"

namespace ringlimit::storage {

// One limit of an update: the name of the state and the spec that interprets it.
struct Slot {
  std::string_view name;
  const limiter::LimitSpec* spec = nullptr;
};

// A copy of one stored state, as returned by Get.
struct StoredState {
  std::string name;
  limiter::LimitSpec spec;    // the spec the state was last updated with
  limiter::MergeState state;  // every decider's record (limiter/merge.h); copies merge, never overwrite
  uint64_t version = 0;       // this store's change counter: increases by at least 1 on every change
};

struct StoreStats {
  uint64_t keys = 0;        // states held in memory
  uint64_t evictions = 0;   // states evicted by the memory bound since start
  uint64_t idle_drops = 0;  // states dropped because they were back to their initial value
  uint64_t bytes = 0;       // memory the states take, as accounted against MemoryStoreOptions::max_bytes
};

class StateStore {
 public:
  virtual ~StateStore() = default;

  // Loads the states of `entity` named by `slots` (an empty MergeState when absent), calls
  // fn(states) -- states[i] belongs to slots[i] -- and keeps whatever fn changed (charged with
  // limiter::CheckMerged and friends, detected by limiter::ChangeDigest), bumping versions.
  // The whole call is atomic with respect to other calls on the same entity.
  // `fn` must not block, do I/O, or call back into the store.
  // `now` is the current time; it lets the store drop idle states and compute expiries.
  virtual void Update(std::string_view entity, std::span<const Slot> slots, limiter::TimeNs now,
                      const std::function<void(std::span<limiter::MergeState* const>)>& fn) = 0;

  // Every stored state of `entity`, in name order.
  [[nodiscard]] virtual std::vector<StoredState> Get(std::string_view entity) = 0;
  // The same into `out` (resized to the count), whose states keep their storage where they can: a caller
  // that reads key after key into one vector (the replication sender) allocates nothing for states that fit.
  virtual void GetInto(std::string_view entity, std::vector<StoredState>& out) { out = Get(entity); }

  // Removes the state `name` of `entity`, or all of them when `name` is nullopt.
  // Returns how many states were removed.
  virtual size_t Erase(std::string_view entity, std::optional<std::string_view> name) = 0;

  [[nodiscard]] virtual StoreStats Stats() const = 0;
};

}  // namespace ringlimit::storage

#endif  // RINGLIMIT_STORAGE_STATE_STORE_H_
