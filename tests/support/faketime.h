// Faketime: the environment that starts a process under libfaketime (Debian package `faketime`) with
// its wall clock (CLOCK_REALTIME, time(), gettimeofday) shifted by a fixed offset while its monotonic
// clock stays real -- a node whose clock is wrong but whose timers run right, for the clock-skew tests
// of issue 13. Pass it as NodeProcessOptions::env (or NodePlacement::env).
//
//   auto env = FaketimeEnv("+1h");     // or "-1h", "+90s"
//   if (env.empty()) GTEST_SKIP() << "libfaketime is not installed (apt-get install faketime)";
//
// Thread safety: a pure function of its argument and the file system.
#ifndef RINGLIMIT_TESTS_SUPPORT_FAKETIME_H_
#define RINGLIMIT_TESTS_SUPPORT_FAKETIME_H_

#include <unistd.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace ringlimit::testing {

// Where Debian's faketime package puts the library (the multi-threaded variant first: ringlimitd runs
// several threads).
[[nodiscard]] inline std::string FaketimeLibrary() {
  for (const char* path : {"/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1",
                           "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
                           "/usr/lib/aarch64-linux-gnu/faketime/libfaketimeMT.so.1"}) {
    if (access(path, R_OK) == 0) return path;
  }
  return "";
}

// "NAME=value" entries: LD_PRELOAD of libfaketime, FAKETIME="<offset>" (libfaketime's relative form:
// "+1h", "-3600s", ...), FAKETIME_DONT_FAKE_MONOTONIC=1, and no caching of the offset so it is exact
// from the first call. In an ASan build the preloaded library comes before the ASan runtime, which ASan
// refuses by default; ASAN_OPTIONS keeps the caller's options and adds verify_asan_link_order=0.
// Empty if the library is missing.
[[nodiscard]] inline std::vector<std::string> FaketimeEnv(const std::string& offset) {
  const std::string library = FaketimeLibrary();
  if (library.empty()) return {};
  const char* asan = std::getenv("ASAN_OPTIONS");
  std::string asan_options = "ASAN_OPTIONS=";
  if (asan != nullptr && *asan != '\0') asan_options += std::string(asan) + ":";
  asan_options += "verify_asan_link_order=0";
  return {"LD_PRELOAD=" + library, "FAKETIME=" + offset, "FAKETIME_DONT_FAKE_MONOTONIC=1",
          "FAKETIME_NO_CACHE=1", asan_options};
}

}  // namespace ringlimit::testing

#endif  // RINGLIMIT_TESTS_SUPPORT_FAKETIME_H_
