// World: the deterministic simulator's clock, event queue, random source and trace.
//
// Simulated time only: nothing here (or anywhere in tests/sim/) reads a real clock, starts a thread or
// sleeps. One event queue ordered by (time, sequence number) serves every node; one seeded
// std::mt19937_64 makes every random choice. The same seed therefore gives the same run, bit for bit,
// which the trace hash (every event's time, sequence and node, plus what the simulator notes) proves.
//
// Nodes are slots 0..N-1. An event belongs to a slot's life (a crash and restart starts a new life) or to
// the world (slot -1). A paused slot's events wait in a backlog and run, in order, when it resumes (their
// time is then the resume time); a stopped slot's events, and those of an earlier life, are dropped --
// their functions destroyed, never run.
//
// Thread safety: none needed -- everything runs on the caller's thread, one event at a time.
#ifndef RINGLIMIT_TESTS_SIM_WORLD_H_
#define RINGLIMIT_TESTS_SIM_WORLD_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "replication/executor.h"

namespace ringlimit::sim {

using MonoTime = replication::MonoTime;
using std::chrono::milliseconds;

// What a trace record is about (also hashed).
enum class TraceKind : uint8_t {
  kFault = 1,    // a scheduled fault or heal
  kMember = 2,   // a membership event seen by a node
  kRing = 3,     // a node published a ring
  kCheck = 4,    // a client check: entered, decided, answered
  kNetwork = 5,  // a request sent, dropped, failed
  kNote = 6,     // anything else
};

struct TraceRecord {
  MonoTime at{};
  int node = -1;
  TraceKind kind = TraceKind::kNote;
  std::string text;
};

class World {
 public:
  explicit World(uint64_t seed, size_t slots);
  ~World();

  World(const World&) = delete;
  World& operator=(const World&) = delete;

  [[nodiscard]] MonoTime now() const { return now_; }
  [[nodiscard]] std::mt19937_64& rng() { return rng_; }
  // A uniform integer in [lo, hi].
  [[nodiscard]] uint64_t Uniform(uint64_t lo, uint64_t hi);
  // True with probability p.
  [[nodiscard]] bool Chance(double p);

  // --- Slots -------------------------------------------------------------------------------------------
  [[nodiscard]] size_t slots() const { return slots_.size(); }
  [[nodiscard]] uint64_t life(int slot) const { return slots_[slot].life; }
  [[nodiscard]] bool up(int slot) const { return slots_[slot].up; }
  [[nodiscard]] bool paused(int slot) const { return slots_[slot].paused; }
  // Starts a new life of `slot` (up, not paused) and returns it.
  uint64_t StartLife(int slot);
  // Stops `slot`: its queued and backlogged events are destroyed now, later ones are never queued.
  void StopLife(int slot);
  void Pause(int slot);
  // Runs the backlog of `slot` from now on, in its order.
  void Resume(int slot);
  // Holds `slot`'s events from now until `until`, as a descheduled process (CPU starvation): Pause now,
  // Resume at `until` (a world event, void if the slot's life ended meanwhile). Not to be mixed with
  // Pause and Resume of the same slot.
  void Hold(int slot, MonoTime until);

  // --- Events ------------------------------------------------------------------------------------------
  // Queues `fn` at `at` (not before now) for `slot`'s life `life` (slot -1: the world's). Dropped at once
  // when that life is over.
  void Schedule(MonoTime at, int slot, uint64_t life, std::function<void()> fn);
  // The world's own events (faults, clients, the settle checks).
  void At(MonoTime at, std::function<void()> fn) { Schedule(at, -1, 0, std::move(fn)); }
  // Runs every event due at or before `until`, then sets the clock to `until`. Returns false, and runs
  // nothing more from then on, when the simulated clock stops advancing: more than kSpinLimit events in a
  // row at one instant (some code re-arms a timer in the past forever -- a busy loop on a real node).
  bool RunUntil(MonoTime until);
  [[nodiscard]] uint64_t events_run() const { return events_run_; }
  // The instant the clock stopped advancing at, if it did.
  [[nodiscard]] std::optional<MonoTime> spinning() const { return spinning_; }
  static constexpr uint64_t kSpinLimit = 200'000;

  // --- Trace -------------------------------------------------------------------------------------------
  // Whether text records are kept (a failing seed is run again with them on). Off: only the hash.
  void set_tracing(bool on) { tracing_ = on; }
  [[nodiscard]] bool tracing() const { return tracing_; }
  // Mixes numbers into the trace hash (cheap; always on).
  void Hash(uint64_t a, uint64_t b = 0);
  // Keeps a text record when tracing. Not hashed: a traced run must be the same run as an untraced one.
  void Trace(int node, TraceKind kind, std::string text);
  [[nodiscard]] uint64_t trace_hash() const { return hash_; }
  [[nodiscard]] const std::vector<TraceRecord>& records() const { return records_; }

 private:
  struct Event {
    MonoTime at{};
    uint64_t seq = 0;
    int slot = -1;
    uint64_t life = 0;
    std::function<void()> fn;
  };
  struct Later {  // heap order: the earliest (at, seq) on top
    bool operator()(const Event& x, const Event& y) const {
      return x.at != y.at ? x.at > y.at : x.seq > y.seq;
    }
  };
  struct Slot {
    uint64_t life = 0;
    bool up = false;
    bool paused = false;
    std::vector<Event> backlog;  // a paused slot's events, in order
  };

  MonoTime now_{};
  uint64_t next_seq_ = 0;
  uint64_t events_run_ = 0;
  uint64_t same_instant_ = 0;  // events run in a row at now_
  std::optional<MonoTime> spinning_;
  std::mt19937_64 rng_;
  std::vector<Event> queue_;  // a heap by Later
  std::vector<Slot> slots_;
  bool tracing_ = false;
  uint64_t hash_ = 14695981039346656037ULL;  // FNV-1a offset basis
  std::vector<TraceRecord> records_;
};

// The Executor of one life of one slot: Post is an event at now, a Timer an event at its instant,
// cancelled through a generation counter. Timers keep only a shared token, so a timer that outlives its
// executor (inside a function destroyed after a crash) is harmless.
class SimExecutor final : public replication::Executor {
 public:
  SimExecutor(World& world, int slot, uint64_t life)
      : token_(std::make_shared<Token>(Token{&world, slot, life})) {}
  ~SimExecutor() override { token_->world = nullptr; }

  SimExecutor(const SimExecutor&) = delete;
  SimExecutor& operator=(const SimExecutor&) = delete;

  [[nodiscard]] MonoTime Now() const override { return token_->world->now(); }
  void Post(std::function<void()> fn) override;
  [[nodiscard]] std::unique_ptr<Timer> NewTimer() override;

 private:
  struct Token {
    World* world;  // null once the executor is gone: timers then arm nothing
    int slot;
    uint64_t life;
  };
  class SimTimer;

  std::shared_ptr<Token> token_;
};

}  // namespace ringlimit::sim

#endif  // RINGLIMIT_TESTS_SIM_WORLD_H_
