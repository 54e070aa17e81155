// The `ringlimit` command line: sub-commands check, inspect, reset, cluster status|leave, bench.
//
// RunCli parses `args` (without the program name), runs one sub-command and returns the process exit
// code: check exits 0 allowed / 1 denied / 2 error; every other command 0 on success, 2 on error or bad
// usage. Results go to `out`, errors and progress to `err`.
//
// Thread safety: RunCli may run concurrently with itself (no global state).
#ifndef RINGLIMIT_CLIENT_CLI_COMMANDS_H_
#define RINGLIMIT_CLIENT_CLI_COMMANDS_H_

#include <iosfwd>
#include <string>
#include <vector>

namespace ringlimit::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitDenied = 1;
inline constexpr int kExitError = 2;

[[nodiscard]] int RunCli(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace ringlimit::cli

#endif  // RINGLIMIT_CLIENT_CLI_COMMANDS_H_
