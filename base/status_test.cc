// Status and Result<T>.
#include "base/status.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace ringlimit {
namespace {

TEST(Status, OkByDefault) {
  const Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kOk);
  EXPECT_EQ(s.message(), "");
  EXPECT_EQ(s.ToString(), "ok");
  EXPECT_EQ(s, Status::OK());
}

TEST(Status, EveryFactoryHasItsKind) {
  struct Case {
    Status status;
    bool (Status::*is)() const;
    std::string_view name;
  };
  const Case cases[] = {
      {Status::InvalidArgument("m"), &Status::IsInvalidArgument, "invalid_argument"},
      {Status::NotFound("m"), &Status::IsNotFound, "not_found"},
      {Status::AlreadyExists("m"), &Status::IsAlreadyExists, "already_exists"},
      {Status::Corruption("m"), &Status::IsCorruption, "corruption"},
      {Status::IOError("m"), &Status::IsIOError, "io_error"},
      {Status::Unavailable("m"), &Status::IsUnavailable, "unavailable"},
      {Status::Timeout("m"), &Status::IsTimeout, "timeout"},
      {Status::Internal("m"), &Status::IsInternal, "internal"},
  };
  for (const Case& c : cases) {
    EXPECT_FALSE(c.status.ok()) << c.name;
    EXPECT_TRUE((c.status.*c.is)()) << c.name;
    EXPECT_EQ(Status::CodeName(c.status.code()), c.name);
    EXPECT_EQ(c.status.ToString(), std::string(c.name) + ": m");
    // Exactly one predicate holds.
    int holding = 0;
    for (const Case& other : cases) holding += (c.status.*other.is)() ? 1 : 0;
    EXPECT_EQ(holding, 1) << c.name;
  }
}

TEST(Status, TwoPartMessagesAreJoinedOnlyWhenBothAreGiven) {
  EXPECT_EQ(Status::InvalidArgument("policies.api.limits", "required").message(),
            "policies.api.limits: required");
  EXPECT_EQ(Status::InvalidArgument("", "not valid JSON").message(), "not valid JSON");
  EXPECT_EQ(Status::InvalidArgument("alone").message(), "alone");
  EXPECT_EQ(Status::IOError("dir", "").message(), "dir");
}

TEST(Status, WithContextKeepsTheKindAndPrefixesTheMessage) {
  const Status s = Status::IOError("cannot lock", "/data/LOCK").WithContext("storage");
  EXPECT_TRUE(s.IsIOError());
  EXPECT_EQ(s.message(), "storage: cannot lock: /data/LOCK");
  EXPECT_EQ(Status::InvalidArgument("vnodes").WithContext("").message(), "vnodes");
  EXPECT_TRUE(Status::OK().WithContext("storage").ok());
  EXPECT_EQ(Status::OK().WithContext("storage").message(), "");
}

TEST(Result, HoldsAValueOrAStatus) {
  Result<int> good = 42;
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE(static_cast<bool>(good));
  EXPECT_TRUE(good.status().ok());
  EXPECT_EQ(*good, 42);
  EXPECT_EQ(good.value(), 42);

  Result<int> bad = Status::NotFound("no such thing");
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(bad.status().IsNotFound());
  EXPECT_EQ(bad.status().message(), "no such thing");

  EXPECT_EQ(good.value_or(0), 42);
  EXPECT_EQ(bad.value_or(0), 0);
}

TEST(Result, ConvertsFromWhatTheValueConvertsFrom) {
  auto make = []() -> Result<std::string> { return "text"; };  // const char* -> std::string
  EXPECT_EQ(*make(), "text");
  auto shared = []() -> Result<std::shared_ptr<const int>> { return std::make_shared<int>(7); };
  EXPECT_EQ(**shared(), 7);
}

TEST(Result, MoveOnlyValuesMoveOut) {
  Result<std::unique_ptr<int>> r = std::make_unique<int>(5);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r.value(), 5);
  std::unique_ptr<int> taken = std::move(r).value();
  EXPECT_EQ(*taken, 5);
  Result<std::unique_ptr<int>> failed = Status::IOError("disk");
  EXPECT_EQ(std::move(failed).status(), Status::IOError("disk"));
}

}  // namespace
}  // namespace ringlimit
