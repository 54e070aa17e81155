// The wire form of a LimitSpec: limiter::LimitSpec, Algorithm and Mode <-> proto/state.proto. The one place
// these conversions are written; the storage codec (RocksDB values, replicated states) and forwarded checks
// (peer.NamedLimit) both go through it.
//
// A separate library (ringlimit_limiter_wire) so the limiter core itself needs no Protobuf -- as
// ring/membership_wire does for the ring.
//
// Enum conversions are exhaustive switches without `default:`: adding an algorithm or a mode on either
// side makes -Wswitch (an error here) point at the case to write. An incoming number that no case
// matches -- from a newer node, a corrupt row, or a proto3 enum holding an unknown value -- is rejected.
//
// Thread safety: pure functions.
#ifndef RINGLIMIT_LIMITER_SPEC_WIRE_H_
#define RINGLIMIT_LIMITER_SPEC_WIRE_H_

#include "base/status.h"
#include "limiter/limiter.h"
#include "state.pb.h"

namespace ringlimit::limiter {

// A value with no enumerator keeps its number (the receiver rejects it); Algorithm{} -- the algorithm of
// a State never written -- is ALGORITHM_UNSPECIFIED.
[[nodiscard]] state::Algorithm AlgorithmToProto(Algorithm algorithm);
[[nodiscard]] state::Mode ModeToProto(Mode mode);

// InvalidArgument for ALGORITHM_UNSPECIFIED and for numbers with no limiter enumerator.
[[nodiscard]] Result<Algorithm> AlgorithmFromProto(state::Algorithm algorithm);
// InvalidArgument for numbers with no limiter enumerator.
[[nodiscard]] Result<Mode> ModeFromProto(state::Mode mode);

// Every field of `spec` into `*out` (overwritten).
void SpecToProto(const LimitSpec& spec, state::LimitSpec* out);

// InvalidArgument when an enum holds an unknown number or limiter::Validate refuses the spec (the message
// then names the field: "limit: must be between 1 and ..."). A spec that passes is safe to Check with.
[[nodiscard]] Result<LimitSpec> SpecFromProto(const state::LimitSpec& spec);

}  // namespace ringlimit::limiter

#endif  // RINGLIMIT_LIMITER_SPEC_WIRE_H_
