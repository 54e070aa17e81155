// Published<T>: one immutable value of type T, replaced as a whole by writers and read by many threads
// without a lock on the common path.
//
// The pattern: a writer builds a new `std::shared_ptr<const T>` and publishes it; every publish bumps
// an atomic generation. A reader keeps a cached copy of the value together with the generation it was
// read at; each read costs one acquire load of the generation, and only when that has moved does the
// reader take the writer mutex (for a pointer copy) to refresh its copy. Readers therefore never wait
// for each other, and wait for a writer only on the first read after that writer's publish.
//
// Two ways to read:
//  - Reader: an object owned by one reader (a connection, a strand, a worker). Holds its copy itself;
//    nothing outlives it.
//  - Current() / Cached(): a per-thread cache inside Published, for callers that have no place to keep
//    a Reader (a free function, an interface method called from any thread). The cache is a small
//    direct-mapped table per thread and per T, keyed by a process-unique instance id (never the
//    address, which a new instance may reuse) and the generation, so several instances of one T in one
//    process (several nodes in one test) never see each other's values; two instances mapping to the
//    same entry only cost each other the slow path.
//
// Versions: version() is the caller's number for the current value: Publish numbers values 1, 2, 3...;
// PublishVersion takes the number from the caller (e.g. RingView::version()) and installs only newer
// ones. 0 means nothing has been published. Readers key their caches on the internal generation, not on
// version(), so every publish is seen whatever the caller's numbering.
//
// Thread safety: every method of Published may be called concurrently from any number of threads without
// external synchronisation. A Reader is used by one thread at a time (it is not safe for concurrent use).
//
// Lifetime: the Published must outlive every Reader of it and every call into it. A value stays alive
// while anyone holds it: the Published, a Reader, a copy returned by Current(), and also a thread's
// cache entry -- a thread that read a Published keeps the value it last read (through that entry) until
// it reads again or exits, even after the Published is gone. T's destructor must therefore not depend on
// anything that the Published does not outlive (plain data is fine; objects tied to an io_context are
// not: publish weak references to them instead).
#ifndef RINGLIMIT_BASE_PUBLISHED_H_
#define RINGLIMIT_BASE_PUBLISHED_H_

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>

namespace ringlimit {

template <class T>
class Published {
 public:
  using Ptr = std::shared_ptr<const T>;

  // Starts empty: version() is 0 and readers get nullptr.
  Published() : id_(NextId()) {}
  Published(const Published&) = delete;
  Published& operator=(const Published&) = delete;

  // --- Writers ---

  // Installs `value` (may be null) as version version() + 1, which it returns.
  uint64_t Publish(Ptr value) {
    Ptr old;  // released outside the lock: a value's destructor may be slow
    std::lock_guard lock(mutex_);
    old = std::exchange(current_, std::move(value));
    const uint64_t version = version_.load(std::memory_order_relaxed) + 1;
    Install(version);
    return version;
  }

  // Installs `value` as `version` if nothing has been published yet or `version` > version(); returns
  // whether it did. A rejected value is released at once.
  bool PublishVersion(Ptr value, uint64_t version) {
    Ptr old;
    std::lock_guard lock(mutex_);
    if (generation_.load(std::memory_order_relaxed) != 0 &&
        version <= version_.load(std::memory_order_relaxed))
      return false;
    old = std::exchange(current_, std::move(value));
    Install(version);
    return true;
  }

  // --- Readers ---

  // The version of the current value (0 before the first publish). One acquire load.
  [[nodiscard]] uint64_t version() const { return version_.load(std::memory_order_acquire); }

  // The current value, read under the writer mutex. For cold paths and writers.
  [[nodiscard]] Ptr Load() const {
    std::lock_guard lock(mutex_);
    return current_;
  }

  // The current value, through this thread's cache: one atomic load (and no lock) when nothing has been
  // published since this thread last read this instance.
  [[nodiscard]] Ptr Current() const { return Cached(); }

  // The same without copying the pointer (no reference-count traffic). The reference is to this thread's
  // cache entry: it stays valid, and keeps the value alive, only until this thread's next read of any
  // Published<T>. Copy it (or use Current()) to keep the value longer.
  [[nodiscard]] const Ptr& Cached() const {
    Slot& slot = ThreadSlots()[id_ % kSlots];
    if (slot.id == id_ && slot.generation == generation_.load(std::memory_order_acquire)) return slot.value;
    Refresh(slot);
    return slot.value;
  }

  // A reader's own cached copy: Get() costs one atomic load while the value is unchanged.
  class Reader {
   public:
    explicit Reader(const Published& source) : source_(source) {}
    Reader(const Reader&) = delete;
    Reader& operator=(const Reader&) = delete;

    // The current value (null before the first publish). The reference is valid until the next Get().
    [[nodiscard]] const Ptr& Get() {
      if (generation_ != source_.generation_.load(std::memory_order_acquire)) {
        Ptr old;
        std::lock_guard lock(source_.mutex_);
        old = std::exchange(value_, source_.current_);
        generation_ = source_.generation_.load(std::memory_order_relaxed);
      }
      return value_;
    }

   private:
    const Published& source_;
    uint64_t generation_ = 0;  // matches a new Published's: both stand for "nothing published"
    Ptr value_;
  };

 private:
  // Entries of the per-thread cache (per T). Eight distinct instances of one T read by the same thread
  // stay cached at once when their ids are consecutive, which they are unless instances come and go.
  static constexpr size_t kSlots = 8;
  struct Slot {
    uint64_t id = 0;  // 0: empty (ids start at 1)
    uint64_t generation = 0;
    Ptr value;
  };

  static uint64_t NextId() {
    static std::atomic<uint64_t> last{0};
    return last.fetch_add(1, std::memory_order_relaxed) + 1;
  }

  static std::array<Slot, kSlots>& ThreadSlots() {
    thread_local std::array<Slot, kSlots> slots;
    return slots;
  }

  // REQUIRES: mutex_ held. Makes current_ visible to readers as `version`.
  void Install(uint64_t version) {
    version_.store(version, std::memory_order_release);
    generation_.store(generation_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }

  void Refresh(Slot& slot) const {
    Ptr old = std::move(slot.value);  // perhaps another instance's: released outside the lock
    slot.id = 0;
    std::lock_guard lock(mutex_);
    slot.value = current_;
    slot.generation = generation_.load(std::memory_order_relaxed);
    slot.id = id_;
  }

  // Constant after construction.
  const uint64_t id_;  // unique among the Published<T> of this process

  mutable std::mutex mutex_;
  // Protected by mutex_; the atomics are written under it and read without it. generation_ counts
  // publishes (0: none yet).
  Ptr current_;
  std::atomic<uint64_t> version_{0};
  std::atomic<uint64_t> generation_{0};
};

}  // namespace ringlimit

#endif  // RINGLIMIT_BASE_PUBLISHED_H_
