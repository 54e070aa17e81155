// CallgrindTotals on callgrind out files written here: totals, system calls without clock_gettime's, and
// the heap allocations counted from the calls= lines (cluster_bench's allocs/chk).
#include "bench/cluster/callgrind.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace ringlimit::bench {
namespace {

namespace fs = std::filesystem;

class CallgrindTotalsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("callgrind_test." + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes `body` after a callgrind header (events Ir sysCount sysTime) and returns the file.
  fs::path Write(const std::string& body) {
    const fs::path file = dir_ / "dump.callgrind";
    std::ofstream(file) << "# callgrind format\nversion: 1\ncreator: callgrind-3.19.0\npositions: line\n"
                        << "events: Ir sysCount sysTime\nsummary: 0\n\n"
                        << body;
    return file;
  }

  fs::path dir_;
};

// The shape of a real dump (ringlimitd, callgrind 3.19): names compressed to "(id)" after their first use,
// operator new calling malloc, malloc calling _int_malloc, relative positions and "*" lines.
constexpr const char* kDump = R"(ob=(1) /usr/lib/x86_64-linux-gnu/libc.so.6
fl=(1) ./malloc/./malloc/malloc.c
fn=(1) malloc
3281 6265
cfn=(2) _int_malloc
calls=131 1338
* 16821

fn=(3) realloc
10 50
cfn=(1)
calls=4 3281
* 400

ob=(2) /usr/lib/x86_64-linux-gnu/libstdc++.so.6.0.30
fl=(2) ???
fn=(4) operator new(unsigned long)
0 7000
cob=(1)
cfi=(1)
cfn=(1)
calls=1252 3281
0 70996
0 1252

ob=(3) /ringlimitd
fl=(3) node/session.cc
fn=(5) ringlimit::node::Session::OnRequest()
12 900
cob=(2)
cfi=(2)
cfn=(4)
calls=1000 0
+3 60000
cob=(1)
cfi=(1)
cfn=(1) malloc
calls=7 3281
-1 49
cfn=(6) calloc
calls=2 20
* 30
cfn=(3)
calls=3 10
* 90
cfn=(7) memalign'2
calls=1 40
* 10
cfn=(8) free
calls=500 60
* 5000

fn=(9) __clock_gettime
0 100 40 3
cfn=(10) _dl_vdso_clock_gettime
calls=5 0
0 20 5 1

fn=(7)
40 30
cfn=(11) _mid_memalign.constprop.0
calls=1 50
* 20

totals: 123456 90 77
)";

TEST_F(CallgrindTotalsTest, CountsAllocationsOnceFromOutsideTheAllocator) {
  auto counts = CallgrindTotals(Write(kDump));
  ASSERT_TRUE(counts) << counts.error();
  // operator new -> malloc 1252, Session -> malloc 7, calloc 2, realloc 3, memalign 1; not Session ->
  // operator new (its malloc is counted), malloc -> _int_malloc, realloc -> malloc, memalign ->
  // _mid_memalign, free.
  EXPECT_EQ(counts->allocations, 1252u + 7 + 2 + 3 + 1);
  EXPECT_EQ(counts->instructions, 123456u);
  // sysCount without clock_gettime's self cost (40); its call line's 5 is not self cost.
  EXPECT_EQ(counts->syscalls, 90u - 40);
}

TEST_F(CallgrindTotalsTest, NoAllocationsWithoutCallsIntoTheAllocator) {
  auto counts =
      CallgrindTotals(Write("fn=(1) main\n0 10\ncfn=(2) helper\ncalls=3 0\n0 30\n\ntotals: 40 0 0\n"));
  ASSERT_TRUE(counts) << counts.error();
  EXPECT_EQ(counts->allocations, 0u);
  EXPECT_EQ(counts->instructions, 40u);
}

TEST_F(CallgrindTotalsTest, FailsWithoutTotals) {
  EXPECT_FALSE(CallgrindTotals(Write("fn=(1) main\n0 10\n")));
  EXPECT_FALSE(CallgrindTotals(dir_ / "missing.callgrind"));
}

}  // namespace
}  // namespace ringlimit::bench
