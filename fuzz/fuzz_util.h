// Helpers shared by the fuzz targets (fuzz/*_fuzz.cc): an invariant check that aborts with a message,
// and a reader that splits one fuzz input into a few small choices and the rest.
//
// Thread safety: FuzzInput is a plain value; FUZZ_CHECK only reads its arguments.
#ifndef RINGLIMIT_FUZZ_FUZZ_UTIL_H_
#define RINGLIMIT_FUZZ_FUZZ_UTIL_H_

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

// Aborts (libFuzzer saves the input as a crash) when `condition` is false. Active in every build, NDEBUG
// or not: an invariant the fuzzer breaks is a bug to report, not to compile away.
#define FUZZ_CHECK(condition, what)                                                                       \
  do {                                                                                                    \
    if (!(condition)) {                                                                                   \
      std::fprintf(stderr, "%s:%d: invariant violated: %s (%s)\n", __FILE__, __LINE__, #condition, what); \
      std::abort();                                                                                       \
    }                                                                                                     \
  } while (0)

namespace ringlimit::fuzz {

// Consumes a fuzz input from the front: a few bytes of choices, then the rest as the payload.
class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : rest_(reinterpret_cast<const char*>(data), size) {}

  // The next byte, or 0 once the input is exhausted.
  uint8_t Byte() {
    if (rest_.empty()) return 0;
    const auto b = static_cast<uint8_t>(rest_.front());
    rest_.remove_prefix(1);
    return b;
  }
  // The next 8 bytes as a little-endian integer (missing bytes read as 0).
  uint64_t U64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{Byte()} << (8 * i);
    return v;
  }
  // Everything not consumed yet.
  [[nodiscard]] std::string_view Rest() const { return rest_; }

 private:
  std::string_view rest_;
};

}  // namespace ringlimit::fuzz

#endif  // RINGLIMIT_FUZZ_FUZZ_UTIL_H_
