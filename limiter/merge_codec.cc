// MergeState <-> bytes (merge.h). Layout, all integers little-endian:
//   u8 format (1), u8 algorithm; for algorithm 0 nothing more. Then
//   i64 newest; base: u64 stamp, i64 level_whole, i64 level_frac, i64 at, u32 n, n x Included
//   (u64 id, u64 version, u64 epoch, u64 consumed, i64 expires); u32 m, m x Contribution:
//   u64 id, u64 version, then by algorithm
//     window counters: i64 width, u32 k, k x (i64 index, u64 count)
//     sliding_log:     u32 k, k x i64 stamp
//     buckets:         u64 epoch, u64 consumed, i64 last
// GrantLedger <-> bytes (grant_ledger.h), the same integers:
//   u8 format (1), i64 floor, u32 n, n x (u64 id, u64 granted, u64 used, u64 returned, i64 at, u8 settled)
#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <string>
#include <string_view>

#include "limiter/grant_ledger.h"
#include "limiter/judge.h"
#include "limiter/merge.h"

namespace ringlimit::limiter {
namespace {

constexpr uint8_t kFormat = 1;
constexpr size_t kIncludedBytes = 40;
constexpr size_t kBaseBytes = 8 + 8 + 8 + 8 + 4;
constexpr size_t kHeaderBytes = 1 + 1 + 8;
// Caps on what one record may hold (ParseMergeState rejects more): a sliding_window record keeps at
// most `buckets` cells (plus one being replaced), a sliding_log record at most 2x the largest ceiling.
constexpr uint32_t kMaxCells = kMaxBuckets + 1;
constexpr uint32_t kMaxStamps = static_cast<uint32_t>(internal::kCountDeniedFactor * kMaxSlidingLogLimit);

bool IsWindow(Algorithm a) {
  return a == Algorithm::kFixedWindow || a == Algorithm::kAnchoredWindow ||
         a == Algorithm::kSlidingWindowApprox || a == Algorithm::kSlidingWindow;
}

// Fixed-width little-endian integers, copied whole (a load or store on a little-endian machine).
template <size_t N>
void StoreLe(char* at, uint64_t v) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(at, &v, N);
  } else {
    for (size_t i = 0; i < N; ++i) at[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  }
}

template <size_t N>
uint64_t LoadLe(const char* at) {
  uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, at, N);
  } else {
    for (size_t i = 0; i < N; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(at[i])) << (8 * i);
  }
  return v;
}

// Appends to a string, grown up front by `capacity` (EncodedSize is exact); grows it should that be short.
class Writer {
 public:
  Writer(std::string& out, size_t capacity) : out_(out), pos_(out.size()) { out_.resize(pos_ + capacity); }
  void U8(uint8_t v) { Put<1>(v); }
  void U32(uint32_t v) { Put<4>(v); }
  void U64(uint64_t v) { Put<8>(v); }
  void I64(int64_t v) { Put<8>(static_cast<uint64_t>(v)); }
  void Bytes(std::string_view v) {
    if (out_.size() - pos_ < v.size()) out_.resize(pos_ + v.size());
    std::memcpy(out_.data() + pos_, v.data(), v.size());
    pos_ += v.size();
  }
  // Cuts what was grown up front and not written.
  void Finish() { out_.resize(pos_); }

 private:
  template <size_t N>
  void Put(uint64_t v) {
    if (out_.size() - pos_ < N) out_.resize(std::max(2 * out_.size(), pos_ + N));
    StoreLe<N>(out_.data() + pos_, v);
    pos_ += N;
  }
  std::string& out_;
  size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(std::string_view in) : in_(in) {}
  bool U8(uint8_t& v) {
    uint64_t x;
    return Get<1>(x) && (v = static_cast<uint8_t>(x), true);
  }
  bool U32(uint32_t& v) {
    uint64_t x;
    return Get<4>(x) && (v = static_cast<uint32_t>(x), true);
  }
  bool U64(uint64_t& v) { return Get<8>(v); }
  bool I64(int64_t& v) {
    uint64_t x;
    return Get<8>(x) && (v = static_cast<int64_t>(x), true);
  }
  // The next `n` bytes, or false when fewer are left.
  bool Bytes(size_t n, std::string_view& v) {
    if (in_.size() - pos_ < n) return false;
    v = in_.substr(pos_, n);
    pos_ += n;
    return true;
  }
  // Whether `n` items of `size` bytes each can still be read (checked before reserving).
  bool Fits(uint64_t n, size_t size) const { return n <= (in_.size() - pos_) / size; }
  bool AtEnd() const { return pos_ == in_.size(); }

 private:
  template <size_t N>
  bool Get(uint64_t& v) {
    if (in_.size() - pos_ < N) return false;
    v = LoadLe<N>(in_.data() + pos_);
    pos_ += N;
    return true;
  }
  std::string_view in_;
  size_t pos_ = 0;
};

Status Corrupt(std::string_view what) { return Status::Corruption("merge state", what); }

}  // namespace

namespace {

// The exact size EncodeMergeState writes (reserved up front: one allocation per state).
size_t EncodedSize(const MergeState& s) {
  size_t n = 2;
  if (s.algorithm == Algorithm{}) return n;
  n += 8 + 8 + 8 + 8 + 8 + 4 + s.base.included.size() * 40 + 4;
  for (const Contribution& c : s.contributions) {
    n += 16;
    if (IsWindow(s.algorithm)) {
      n += 8 + 4 + c.cells.size() * 16;
    } else if (s.algorithm == Algorithm::kSlidingLog) {
      n += 4 + c.stamps.size() * 8;
    } else {
      n += 24;
    }
  }
  return n;
}

}  // namespace

namespace {

// Format 2 is format 1 followed by the key's grant ledger (u32 length + EncodeGrantLedger), written only
// when the ledger is not empty: a state that never lent encodes exactly as before.
constexpr uint8_t kFormatWithGrants = 2;

bool HasLedger(const GrantLedger& g) {
  return !g.records.empty() || g.floor != std::numeric_limits<TimeNs>::min();
}

void EncodeBody(Writer& w, const MergeState& s);

}  // namespace

std::string EncodeMergeState(const MergeState& s) {
  std::string out;
  AppendMergeState(s, out);
  return out;
}

void AppendMergeState(const MergeState& s, std::string& out) {
  const bool grants = HasLedger(s.grants);
  Writer w(out, EncodedSize(s) + (grants ? 4 + 13 + s.grants.records.size() * 41 : 0));
  w.U8(grants ? kFormatWithGrants : kFormat);
  EncodeBody(w, s);
  if (grants) {
    const std::string ledger = EncodeGrantLedger(s.grants);
    w.U32(static_cast<uint32_t>(ledger.size()));
    w.Bytes(ledger);
  }
  w.Finish();
}

namespace {

void EncodeBody(Writer& w, const MergeState& s) {
  w.U8(static_cast<uint8_t>(s.algorithm));
  if (s.algorithm == Algorithm{}) {
    return;
  }
  w.I64(s.newest);
  w.U64(s.base.stamp);
  w.I64(s.base.level_whole);
  w.I64(s.base.level_frac);
  w.I64(s.base.at);
  w.U32(static_cast<uint32_t>(s.base.included.size()));
  for (const Included& e : s.base.included) {
    w.U64(e.id);
    w.U64(e.version);
    w.U64(e.epoch);
    w.U64(e.consumed);
    w.I64(e.expires);
  }
  w.U32(static_cast<uint32_t>(s.contributions.size()));
  for (const Contribution& c : s.contributions) {
    w.U64(c.id);
    w.U64(c.version);
    if (IsWindow(s.algorithm)) {
      w.I64(c.width);
      w.U32(static_cast<uint32_t>(c.cells.size()));
      for (const Cell& cell : c.cells) {
        w.I64(cell.index);
        w.U64(cell.count);
      }
    } else if (s.algorithm == Algorithm::kSlidingLog) {
      w.U32(static_cast<uint32_t>(c.stamps.size()));
      for (TimeNs t : c.stamps) {
        w.I64(t);
      }
    } else {
      w.U64(c.epoch);
      w.U64(c.consumed);
      w.I64(c.last);
    }
  }
}

// The end of a state: format 2's ledger, then nothing.
Status Finish(Reader& r, uint8_t format, MergeState& s) {
  if (format == kFormatWithGrants) {
    uint32_t n = 0;
    std::string_view ledger;
    if (!r.U32(n) || !r.Bytes(n, ledger)) {
      return Corrupt("truncated grant ledger");
    }
    Result<GrantLedger> parsed = ParseGrantLedger(ledger);
    if (!parsed.ok()) {
      return parsed.status();
    }
    s.grants = std::move(parsed).value();
    if (!HasLedger(s.grants)) {
      return Corrupt("empty grant ledger in format 2");  // not canonical: format 1 says that
    }
  }
  if (!r.AtEnd()) {
    return Corrupt("trailing bytes");
  }
  return Status::OK();
}

}  // namespace

Status ParseMergeStateInto(std::string_view bytes, MergeState& s) {
  Clear(s);
  Reader r(bytes);
  uint8_t format = 0, algorithm = 0;
  if (!r.U8(format) || !r.U8(algorithm)) {
    return Corrupt("truncated header");
  }
  if (format != kFormat && format != kFormatWithGrants) {
    return Corrupt("unknown format " + std::to_string(format));
  }
  if (algorithm > static_cast<uint8_t>(Algorithm::kAnchoredWindow)) {
    return Corrupt("unknown algorithm " + std::to_string(algorithm));
  }
  s.algorithm = static_cast<Algorithm>(algorithm);
  if (s.algorithm == Algorithm{}) {
    return Finish(r, format, s);
  }
  uint32_t n = 0;
  if (!r.I64(s.newest) || !r.U64(s.base.stamp) || !r.I64(s.base.level_whole) || !r.I64(s.base.level_frac) ||
      !r.I64(s.base.at) || !r.U32(n)) {
    return Corrupt("truncated base");
  }
  if (s.base.level_whole < 0 || s.base.level_frac < 0) {
    return Corrupt("negative level");
  }
  if (n > kMaxContributors || !r.Fits(n, kIncludedBytes)) {
    return Corrupt("too many base entries");
  }
  s.base.included.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Included& e = s.base.included[i];
    if (!r.U64(e.id) || !r.U64(e.version) || !r.U64(e.epoch) || !r.U64(e.consumed) || !r.I64(e.expires)) {
      return Corrupt("truncated base entry");
    }
    if (i > 0 && e.id <= s.base.included[i - 1].id) {
      return Corrupt("base entries out of order");
    }
  }
  if (!r.U32(n)) {
    return Corrupt("truncated contributions");
  }
  if (n > kMaxContributors || !r.Fits(n, 16 + 4)) {
    return Corrupt("too many contributions");
  }
  s.contributions.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    Contribution& c = s.contributions[i];
    if (!r.U64(c.id) || !r.U64(c.version)) {
      return Corrupt("truncated contribution");
    }
    if (i > 0 && c.id <= s.contributions[i - 1].id) {
      return Corrupt("contributions out of order");
    }
    uint32_t k = 0;
    if (IsWindow(s.algorithm)) {
      if (!r.I64(c.width) || !r.U32(k)) {
        return Corrupt("truncated cells");
      }
      if (c.width <= 0 || k > kMaxCells || !r.Fits(k, 16)) {
        return Corrupt("bad cells");
      }
      c.cells.resize(k);
      for (uint32_t j = 0; j < k; ++j) {
        if (!r.I64(c.cells[j].index) || !r.U64(c.cells[j].count)) {
          return Corrupt("truncated cell");
        }
        if (c.cells[j].count == 0 || (j > 0 && c.cells[j].index <= c.cells[j - 1].index)) {
          return Corrupt("bad cell");
        }
      }
    } else if (s.algorithm == Algorithm::kSlidingLog) {
      if (!r.U32(k)) {
        return Corrupt("truncated log");
      }
      if (k > kMaxStamps || !r.Fits(k, 8)) {
        return Corrupt("log too long");
      }
      c.stamps.resize(k);
      for (uint32_t j = 0; j < k; ++j) {
        if (!r.I64(c.stamps[j])) {
          return Corrupt("truncated stamp");
        }
        if (j > 0 && c.stamps[j] < c.stamps[j - 1]) {
          return Corrupt("stamps out of order");
        }
      }
      // Every stamp is an instant charged, so none is after `newest`; a charge of such a log would
      // append its instant (the newest) before the later stamps and write a log no parser accepts.
      if (k > 0 && c.stamps[k - 1] > s.newest) {
        return Corrupt("stamp after the newest instant");
      }
    } else if (!r.U64(c.epoch) || !r.U64(c.consumed) || !r.I64(c.last)) {
      return Corrupt("truncated bucket record");
    }
  }
  return Finish(r, format, s);
}

Result<MergeState> ParseMergeState(std::string_view bytes) {
  MergeState s;
  if (Status parsed = ParseMergeStateInto(bytes, s); !parsed.ok()) return parsed;
  return s;
}

size_t MergeStateMaxBytes(const LimitSpec& spec, size_t contributors) {
  size_t record = 16;
  switch (spec.algorithm) {
    case Algorithm::kFixedWindow:
    case Algorithm::kAnchoredWindow:
    case Algorithm::kSlidingWindowApprox:
    case Algorithm::kSlidingWindow:
      // A record keeps the cells that still count (1, 2 or buckets) plus the one being replaced.
      record += 8 + 4 +
                16 * (static_cast<size_t>(spec.algorithm == Algorithm::kSlidingWindow         ? spec.buckets
                                          : spec.algorithm == Algorithm::kSlidingWindowApprox ? 2
                                                                                              : 1) +
                      1);
      break;
    case Algorithm::kSlidingLog:
      record += 4 + 8 * (StateBytes(spec) - 8) / 8;  // at most the ceiling's stamps (x2 count_denied)
      break;
    case Algorithm::kTokenBucket:
    case Algorithm::kLeakyBucket:
    case Algorithm::kGcra:
      record += 24;
      break;
  }
  return kHeaderBytes + kBaseBytes + contributors * kIncludedBytes + 4 + contributors * record;
}

namespace {
constexpr size_t kGrantRecordBytes = 8 + 8 + 8 + 8 + 8 + 1;
Status CorruptLedger(std::string_view what) { return Status::Corruption("grant ledger", what); }
}  // namespace

std::string EncodeGrantLedger(const GrantLedger& ledger) {
  std::string out;
  Writer w(out, 1 + 8 + 4 + ledger.records.size() * kGrantRecordBytes);
  w.U8(kFormat);
  w.I64(ledger.floor);
  w.U32(static_cast<uint32_t>(ledger.records.size()));
  for (const GrantRecord& r : ledger.records) {
    w.U64(r.id);
    w.U64(r.granted);
    w.U64(r.used);
    w.U64(r.returned);
    w.I64(r.at);
    w.U8(r.settled ? 1 : 0);
  }
  w.Finish();
  return out;
}

Result<GrantLedger> ParseGrantLedger(std::string_view bytes) {
  Reader r(bytes);
  uint8_t format = 0;
  if (!r.U8(format) || format != kFormat) return CorruptLedger("unknown format");
  GrantLedger out;
  uint32_t n = 0;
  if (!r.I64(out.floor) || !r.U32(n)) return CorruptLedger("truncated header");
  if (n > kMaxGrantRecords) return CorruptLedger("too many records");
  if (!r.Fits(n, kGrantRecordBytes)) return CorruptLedger("truncated records");
  out.records.resize(n);
  for (uint32_t i = 0; i < n; ++i) {
    GrantRecord& g = out.records[i];
    uint8_t settled = 0;
    (void)(r.U64(g.id) && r.U64(g.granted) && r.U64(g.used) && r.U64(g.returned) && r.I64(g.at) &&
           r.U8(settled));  // Fits checked the length
    if (g.id == 0 || (i > 0 && g.id <= out.records[i - 1].id)) return CorruptLedger("ids not ascending");
    if (settled > 1) return CorruptLedger("bad settled flag");
    if (g.at < out.floor) return CorruptLedger("record below the floor");
    g.settled = settled == 1;
  }
  if (!r.AtEnd()) return CorruptLedger("trailing bytes");
  return out;
}

}  // namespace ringlimit::limiter
