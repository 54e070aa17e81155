#include "tests/sim/world.h"

#include <algorithm>
#include <utility>

namespace ringlimit::sim {

World::World(uint64_t seed, size_t slots) : rng_(seed), slots_(slots) {}

World::~World() {
  // Functions first: destroying one may destroy timers, which only touch their own tokens.
  queue_.clear();
  for (Slot& s : slots_) s.backlog.clear();
}

uint64_t World::Uniform(uint64_t lo, uint64_t hi) {
  std::uniform_int_distribution<uint64_t> pick(lo, hi);
  return pick(rng_);
}

bool World::Chance(double p) {
  if (p <= 0) return false;
  std::uniform_real_distribution<double> coin(0.0, 1.0);
  return coin(rng_) < p;
}

uint64_t World::StartLife(int slot) {
  Slot& s = slots_[slot];
  s.up = true;
  s.paused = false;
  s.backlog.clear();
  return ++s.life;
}

void World::StopLife(int slot) {
  Slot& s = slots_[slot];
  s.up = false;
  s.paused = false;
  std::vector<Event> backlog = std::move(s.backlog);
  s.backlog.clear();
  std::vector<Event> kept;
  std::vector<Event> dropped;
  kept.reserve(queue_.size());
  for (Event& e : queue_) (e.slot == slot ? dropped : kept).push_back(std::move(e));
  queue_ = std::move(kept);
  std::make_heap(queue_.begin(), queue_.end(), Later());
  // `dropped` and `backlog` die here, after the queue is consistent again: a destructor they run may
  // schedule (it must not, but then it is dropped too since the slot is down).
}

void World::Pause(int slot) { slots_[slot].paused = true; }

void World::Resume(int slot) {
  Slot& s = slots_[slot];
  if (!s.paused) return;
  s.paused = false;
  std::vector<Event> backlog = std::move(s.backlog);
  s.backlog.clear();
  for (Event& e : backlog) Schedule(now_, e.slot, e.life, std::move(e.fn));
}

void World::Hold(int slot, MonoTime until) {
  Pause(slot);
  const uint64_t life = slots_[slot].life;
  At(until, [this, slot, life] {
    if (slots_[slot].up && slots_[slot].life == life) Resume(slot);
  });
}

void World::Schedule(MonoTime at, int slot, uint64_t life, std::function<void()> fn) {
  if (slot >= 0 && (!slots_[slot].up || slots_[slot].life != life)) return;
  queue_.push_back(Event{std::max(at, now_), next_seq_++, slot, life, std::move(fn)});
  std::push_heap(queue_.begin(), queue_.end(), Later());
}

bool World::RunUntil(MonoTime until) {
  if (spinning_.has_value()) return false;
  while (!queue_.empty() && queue_.front().at <= until) {
    std::pop_heap(queue_.begin(), queue_.end(), Later());
    Event e = std::move(queue_.back());
    queue_.pop_back();
    if (e.slot >= 0) {
      Slot& s = slots_[e.slot];
      if (!s.up || s.life != e.life) continue;
      if (s.paused) {
        s.backlog.push_back(std::move(e));
        continue;
      }
    }
    same_instant_ = e.at == now_ ? same_instant_ + 1 : 0;
    if (same_instant_ > kSpinLimit) {
      spinning_ = now_;
      return false;
    }
    now_ = e.at;
    ++events_run_;
    Hash(static_cast<uint64_t>(e.at.count()), (e.seq << 8) ^ static_cast<uint64_t>(e.slot + 1));
    e.fn();
  }
  now_ = std::max(now_, until);
  return true;
}

void World::Hash(uint64_t a, uint64_t b) {
  for (uint64_t v : {a, b}) {
    for (int i = 0; i < 8; ++i) {
      hash_ ^= (v >> (8 * i)) & 0xff;
      hash_ *= 1099511628211ULL;
    }
  }
}

void World::Trace(int node, TraceKind kind, std::string text) {
  if (tracing_) records_.push_back(TraceRecord{now_, node, kind, std::move(text)});
}

// ------------------------------------------------------------------------------------------ SimExecutor

class SimExecutor::SimTimer final : public Timer {
 public:
  explicit SimTimer(std::shared_ptr<Token> token)
      : token_(std::move(token)), state_(std::make_shared<State>()) {}
  ~SimTimer() override { ++state_->generation; }

  void Arm(MonoTime at, std::function<void()> fn) override {
    const uint64_t generation = ++state_->generation;
    state_->armed = true;
    if (token_->world == nullptr) return;
    token_->world->Schedule(at, token_->slot, token_->life, [state = state_, generation, fn = std::move(fn)] {
      if (state->generation != generation) return;
      state->armed = false;
      fn();
    });
  }
  void Cancel() override {
    ++state_->generation;
    state_->armed = false;
  }
  [[nodiscard]] bool armed() const override { return state_->armed; }

 private:
  struct State {
    uint64_t generation = 0;
    bool armed = false;
  };
  std::shared_ptr<Token> token_;
  std::shared_ptr<State> state_;  // shared with queued firings
};

void SimExecutor::Post(std::function<void()> fn) {
  if (token_->world == nullptr) return;
  token_->world->Schedule(token_->world->now(), token_->slot, token_->life, std::move(fn));
}

std::unique_ptr<replication::Executor::Timer> SimExecutor::NewTimer() {
  return std::make_unique<SimTimer>(token_);
}

}  // namespace ringlimit::sim
