// The replay driver of the gcc builds: runs LLVMFuzzerTestOneInput once on every file named on the
// command line, or found (recursively) under a directory named there. CTest runs each <name>_replay on
// its committed corpus (fuzz/corpus/<name>/), so every crash the fuzzer ever found stays a regression
// test in the release and ASan suites. A crashing input aborts (the target's own check, or a sanitizer).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool ReadFile(const std::filesystem::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> files;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    std::error_code ec;
    if (std::filesystem::is_directory(arg, ec)) {
      for (const auto& entry : std::filesystem::recursive_directory_iterator(arg)) {
        if (entry.is_regular_file()) files.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else {
      std::fprintf(stderr, "replay: %s: no such file or directory\n", argv[i]);
      return 2;
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: %s FILE_OR_DIR...  (no input found)\n", argv[0]);
    return 2;
  }
  std::sort(files.begin(), files.end());  // a stable order, so a failure reproduces the same way
  std::string data;
  for (const auto& file : files) {
    if (!ReadFile(file, &data)) {
      std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
      return 2;
    }
    // Announced first: if the input crashes, the last line printed names it.
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", file.c_str(), data.size());
    // A copy of exactly `size` bytes on the heap, as libFuzzer gives it: ASan sees a read past the end.
    std::vector<uint8_t> input(data.begin(), data.end());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::fprintf(stderr, "replay: %zu inputs, no failure\n", files.size());
  return 0;
}
