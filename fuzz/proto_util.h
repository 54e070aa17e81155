// Protobuf helpers of the fuzz targets that decode Protobuf messages.
//
// Thread safety: QuietProtobuf is called once per process, before the first input.
#ifndef RINGLIMIT_FUZZ_PROTO_UTIL_H_
#define RINGLIMIT_FUZZ_PROTO_UTIL_H_

#include <google/protobuf/stubs/logging.h>

#include "state.pb.h"

namespace ringlimit::fuzz {

// Protobuf logs every string field holding invalid UTF-8 it parses; with random input that is most of
// them, and the log would drown libFuzzer's own output. Parsing still fails as before.
inline bool QuietProtobuf() {
  google::protobuf::SetLogHandler(nullptr);
  return true;
}

// A stored row written before states were mergeable (three words, no merged bytes).
//
// KNOWN BUG (reported with issue 16, item 7; not ours to fix: limiter/merge.cc FromPlain and
// storage/state_codec.cc are being changed elsewhere): such a row with out-of-range words -- e.g. a
// token bucket whose level word is negative -- decodes to a merged state that EncodeMergeState writes
// and ParseMergeState then refuses ("negative level"), so the row is lost the next time it is written.
// The targets skip only that round-trip check, only for legacy rows, until it is fixed; remove the
// exemption then (and add the reproducer, fuzz/known-bugs/, to the corpora).
inline bool IsLegacyRow(const state::StoredState& message) {
  return message.merged().empty() && message.word_size() > 0;
}

}  // namespace ringlimit::fuzz

#endif  // RINGLIMIT_FUZZ_PROTO_UTIL_H_
