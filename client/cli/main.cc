// ringlimit: the command-line client (see client/cli/commands.h and docs/client.md).
#include <iostream>
#include <string>
#include <vector>

#include "client/cli/commands.h"

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  return ringlimit::cli::RunCli(args, std::cout, std::cerr);
}
