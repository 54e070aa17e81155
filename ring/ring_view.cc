#include "ring/ring_view.h"

#include <xxhash.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace ringlimit::ring {
namespace {

constexpr Token kMaxToken = std::numeric_limits<Token>::max();
constexpr double kTokenSpace = 18446744073709551616.0;  // 2^64

// A maximal run of tokens with one owner; `member` indexes RingView::members_, -1 for nobody.
struct Segment {
  TokenRange range;
  int64_t member;
};

void AppendSegment(std::vector<Segment>& out, Token first, Token last, int64_t member) {
  if (!out.empty() && out.back().member == member && out.back().range.last + 1 == first) {
    out.back().range.last = last;
    return;
  }
  out.push_back(Segment{TokenRange{first, last}, member});
}

// The whole token space [0, 2^64-1] cut into owner segments, in token order.
std::vector<Segment> Segments(const std::vector<Token>& positions, const std::vector<uint32_t>& owners) {
  std::vector<Segment> out;
  if (positions.empty()) {
    out.push_back(Segment{TokenRange{0, kMaxToken}, -1});
    return out;
  }
  // [0, p0] belongs to vnode 0, (p(i-1), p(i)] to vnode i, and (p(last), max] wraps to vnode 0.
  AppendSegment(out, 0, positions[0], owners[0]);
  for (size_t i = 1; i < positions.size(); ++i) {
    if (positions[i] != positions[i - 1]) AppendSegment(out, positions[i - 1] + 1, positions[i], owners[i]);
  }
  if (positions.back() != kMaxToken) AppendSegment(out, positions.back() + 1, kMaxToken, owners[0]);
  return out;
}

}  // namespace

double TokenRange::Fraction() const {
  // last - first + 1 may be 2^64; compute in double to stay exact enough and overflow-free.
  return (static_cast<double>(last - first) + 1.0) / kTokenSpace;
}

Token VnodePosition(std::string_view id, uint32_t index) {
  // Hash id || index (4 bytes, little-endian). Not XXH3 seeded with the index: for inputs of 1..3 bytes
  // XXH3 folds the seed in linearly, so short ids with different seeds collide exactly (measured: with
  // ids n1..n20 one member owned 2.3x its share).
  char buffer[kMaxMemberIdLength + 4];
  const size_t n = std::min(id.size(), kMaxMemberIdLength);
  std::copy_n(id.data(), n, buffer);
  for (int b = 0; b < 4; ++b) buffer[n + b] = static_cast<char>((index >> (8 * b)) & 0xff);
  return XXH3_64bits(buffer, n + 4);
}

Result<std::shared_ptr<const RingView>> RingView::Create(uint64_t version, std::vector<RingMember> members) {
  std::sort(members.begin(), members.end(),
            [](const RingMember& a, const RingMember& b) { return a.id < b.id; });
  for (size_t i = 0; i < members.size(); ++i) {
    const RingMember& m = members[i];
    if (m.id.empty() || m.id.size() > kMaxMemberIdLength) {
      return Status::InvalidArgument("member id must be 1.." + std::to_string(kMaxMemberIdLength) + " bytes");
    }
    if (i > 0 && members[i - 1].id == m.id) {
      return Status::AlreadyExists("duplicate member id '" + m.id + "'");
    }
    if (m.vnodes == 0 || m.vnodes > kMaxVnodes) {
      return Status::InvalidArgument("member '" + m.id + "' has vnodes " + std::to_string(m.vnodes) +
                                     ", want 1.." + std::to_string(kMaxVnodes));
    }
  }
  return std::shared_ptr<const RingView>(new RingView(version, std::move(members)));
}

RingBuildResult RingView::Build(uint64_t version, std::vector<RingMember> members) {
  Result<std::shared_ptr<const RingView>> created = Create(version, std::move(members));
  if (!created.ok()) return {nullptr, RingError{created.status().message()}};
  return {std::move(created).value(), std::nullopt};
}

RingView::RingView(uint64_t version, std::vector<RingMember> members)
    : version_(version), members_(std::move(members)) {
  struct Vnode {
    Token position;
    uint32_t member;
  };
  std::vector<Vnode> vnodes;
  size_t total = 0;
  for (const RingMember& m : members_) total += m.vnodes;
  vnodes.reserve(total);
  for (uint32_t mi = 0; mi < members_.size(); ++mi) {
    for (uint32_t v = 0; v < members_[mi].vnodes; ++v)
      vnodes.push_back(Vnode{VnodePosition(members_[mi].id, v), mi});
  }
  // Members are sorted by id, so ordering ties by member index orders them by id.
  std::sort(vnodes.begin(), vnodes.end(), [](const Vnode& a, const Vnode& b) {
    return a.position != b.position ? a.position < b.position : a.member < b.member;
  });
  positions_.reserve(total);
  vnode_member_.reserve(total);
  for (const Vnode& v : vnodes) {
    positions_.push_back(v.position);
    vnode_member_.push_back(v.member);
  }

  shares_.assign(members_.size(), 0.0);
  for (const Segment& s : Segments(positions_, vnode_member_)) {
    if (s.member >= 0) shares_[s.member] += s.range.Fraction();
  }

  if (!members_.empty()) {
    std::string canonical;
    for (const RingMember& m : members_) {
      canonical += m.id;
      canonical.push_back('\0');
      canonical += std::to_string(m.vnodes);
      canonical.push_back('\0');
      canonical += m.address;
      canonical.push_back('\0');
    }
    fingerprint_ = XXH3_64bits(canonical.data(), canonical.size());
    if (fingerprint_ == 0) fingerprint_ = 1;  // 0 is reserved for the empty ring
  }
}

size_t RingView::VnodeIndex(Token token) const {
  auto it = std::lower_bound(positions_.begin(), positions_.end(), token);
  return it == positions_.end() ? 0 : static_cast<size_t>(it - positions_.begin());
}

int64_t RingView::OwnerIndex(Token token) const {
  if (positions_.empty()) return -1;
  return vnode_member_[VnodeIndex(token)];
}

int64_t RingView::MemberIndex(std::string_view id) const {
  auto it = std::lower_bound(members_.begin(), members_.end(), id,
                             [](const RingMember& m, std::string_view key) { return m.id < key; });
  if (it == members_.end() || it->id != id) return -1;
  return it - members_.begin();
}

const RingMember* RingView::Find(std::string_view id) const {
  int64_t i = MemberIndex(id);
  return i < 0 ? nullptr : &members_[i];
}

const RingMember* RingView::Owner(Token token) const {
  int64_t i = OwnerIndex(token);
  return i < 0 ? nullptr : &members_[i];
}

RingView::MemberList RingView::PreferenceList(Token token, size_t r) const {
  MemberList out;
  if (positions_.empty() || r == 0) return out;
  const size_t want = std::min(r, members_.size());
  out.reserve(want);
  const size_t start = VnodeIndex(token);
  for (size_t step = 0; step < positions_.size() && out.size() < want; ++step) {
    const RingMember* m = &members_[vnode_member_[(start + step) % positions_.size()]];
    if (std::find(out.begin(), out.end(), m) == out.end()) out.push_back(m);
  }
  return out;
}

double RingView::OwnedShare(std::string_view id) const {
  int64_t i = MemberIndex(id);
  return i < 0 ? 0.0 : shares_[i];
}

std::vector<TokenRange> RingView::Arcs(std::string_view id) const {
  std::vector<TokenRange> out;
  int64_t i = MemberIndex(id);
  if (i < 0) return out;
  for (const Segment& s : Segments(positions_, vnode_member_)) {
    if (s.member == i) out.push_back(s.range);
  }
  return out;
}

std::vector<TokenRange> RingView::HeldRanges(std::string_view id, size_t r) const {
  std::vector<TokenRange> out;
  if (MemberIndex(id) < 0) return out;
  for (const Segment& s : Segments(positions_, vnode_member_)) {
    const MemberList list = PreferenceList(s.range.first, r);
    if (std::none_of(list.begin(), list.end(), [&](const RingMember* m) { return m->id == id; })) continue;
    if (!out.empty() && out.back().last + 1 == s.range.first) {
      out.back().last = s.range.last;
    } else {
      out.push_back(s.range);
    }
  }
  return out;
}

std::vector<RangeMove> RingView::Diff(const RingView& from, const RingView& to) {
  const std::vector<Segment> a = Segments(from.positions_, from.vnode_member_);
  const std::vector<Segment> b = Segments(to.positions_, to.vnode_member_);
  auto name = [](const RingView& view, int64_t member) {
    return member < 0 ? std::string() : view.members_[member].id;
  };
  std::vector<RangeMove> out;
  // Both segment lists cover [0, 2^64-1]; sweep them together.
  size_t i = 0, j = 0;
  Token cur = 0;
  while (i < a.size() && j < b.size()) {
    const Token end = std::min(a[i].range.last, b[j].range.last);
    std::string old_owner = name(from, a[i].member);
    std::string new_owner = name(to, b[j].member);
    if (old_owner != new_owner) {
      if (!out.empty() && out.back().from == old_owner && out.back().to == new_owner &&
          out.back().range.last + 1 == cur) {
        out.back().range.last = end;
      } else {
        out.push_back(RangeMove{TokenRange{cur, end}, std::move(old_owner), std::move(new_owner)});
      }
    }
    if (end == kMaxToken) break;
    if (a[i].range.last == end) ++i;
    if (b[j].range.last == end) ++j;
    cur = end + 1;
  }
  return out;
}

Result<std::shared_ptr<const RingView>> RingView::Without(std::string_view id) const {
  std::vector<RingMember> others;
  others.reserve(members().size());
  for (const RingMember& member : members()) {
    if (member.id != id) others.push_back(member);
  }
  return Create(0, std::move(others));
}

}  // namespace ringlimit::ring
