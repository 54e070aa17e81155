// Status and Result<T>: the one error type of ringlimit's internal APIs (the LevelDB model).
//
//   Status s = ring::Validate(options);
//   if (!s.ok()) return s;                           // or s.IsInvalidArgument(), s.ToString()
//
//   Result<std::unique_ptr<Store>> opened = storage::OpenStateStore(options);
//   if (!opened.ok()) spdlog::critical("{}", opened.status().message());
//   std::unique_ptr<Store> store = std::move(opened).value();
//
// An expected failure (bad options, a corrupt row, a peer that does not answer) is a value with a named
// kind, returned rather than thrown or passed out through a parameter. "Over limit" is a Decision, never a
// Status. Kinds are few and coarse: they say what the caller can do about a failure (fix the input, retry,
// give up); the message says what happened, for humans. The HTTP edge maps kinds to statuses in one
// place (node/service/api_error.h, ApiErrorFromStatus).
//
// Both types are [[nodiscard]]: dropping one silently is a compile error under -Werror.
//
// Thread safety: plain values; a const object may be read from several threads at once.
#ifndef RINGLIMIT_BASE_STATUS_H_
#define RINGLIMIT_BASE_STATUS_H_

#include <cassert>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace ringlimit {

class [[nodiscard]] Status {
 public:
  enum class Code : uint8_t {
    kOk = 0,
    kInvalidArgument = 1,  // the caller's input is wrong (options, a spec, a policy file, a wire value)
    kNotFound = 2,         // the thing asked for does not exist
    kAlreadyExists = 3,    // the thing to add is there already (a duplicate id)
    kCorruption = 4,       // stored or received bytes that cannot be what was written
    kIOError = 5,          // the file system or a device failed (cannot create, read, lock, write)
    kUnavailable = 6,      // a peer or service cannot be reached now; retrying later may work
    kTimeout = 7,          // no answer within the deadline
    kInternal = 8,         // a broken invariant: a bug
  };

  // OK.
  Status() = default;

  // Factories. The message is `msg`, or "msg: msg2" when both are given (either may be empty).
  static Status OK() { return Status(); }
  static Status InvalidArgument(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kInvalidArgument, msg, msg2);
  }
  static Status NotFound(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kNotFound, msg, msg2);
  }
  static Status AlreadyExists(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kAlreadyExists, msg, msg2);
  }
  static Status Corruption(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kCorruption, msg, msg2);
  }
  static Status IOError(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kIOError, msg, msg2);
  }
  static Status Unavailable(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kUnavailable, msg, msg2);
  }
  static Status Timeout(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kTimeout, msg, msg2);
  }
  static Status Internal(std::string_view msg, std::string_view msg2 = {}) {
    return Status(Code::kInternal, msg, msg2);
  }

  [[nodiscard]] bool ok() const { return code_ == Code::kOk; }
  [[nodiscard]] bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  [[nodiscard]] bool IsNotFound() const { return code_ == Code::kNotFound; }
  [[nodiscard]] bool IsAlreadyExists() const { return code_ == Code::kAlreadyExists; }
  [[nodiscard]] bool IsCorruption() const { return code_ == Code::kCorruption; }
  [[nodiscard]] bool IsIOError() const { return code_ == Code::kIOError; }
  [[nodiscard]] bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  [[nodiscard]] bool IsTimeout() const { return code_ == Code::kTimeout; }
  [[nodiscard]] bool IsInternal() const { return code_ == Code::kInternal; }

  [[nodiscard]] Code code() const { return code_; }
  // For humans; empty when ok(). Callers that showed a message before Status existed show this one,
  // so their output is unchanged.
  [[nodiscard]] const std::string& message() const { return message_; }

  // "ok", or "<code name>: <message>" (e.g. "invalid_argument: vnodes: must be between 1 and 4096").
  [[nodiscard]] std::string ToString() const {
    if (ok()) return "ok";
    std::string out(CodeName(code_));
    out += ": ";
    out += message_;
    return out;
  }

  // Stable lower-case name of a code ("ok", "invalid_argument", ...), for logs and metric labels.
  [[nodiscard]] static constexpr std::string_view CodeName(Code code) {
    switch (code) {
      case Code::kOk:
        return "ok";
      case Code::kInvalidArgument:
        return "invalid_argument";
      case Code::kNotFound:
        return "not_found";
      case Code::kAlreadyExists:
        return "already_exists";
      case Code::kCorruption:
        return "corruption";
      case Code::kIOError:
        return "io_error";
      case Code::kUnavailable:
        return "unavailable";
      case Code::kTimeout:
        return "timeout";
      case Code::kInternal:
        return "internal";
    }
    return "unknown";  // a value with no enumerator (never built by the factories)
  }

  // The same kind, with `context` before the message ("storage: cannot lock /data/LOCK"): how a layer
  // says where a failure it passes on happened. OK stays OK.
  [[nodiscard]] Status WithContext(std::string_view context) const {
    if (ok()) return *this;
    return Status(code_, context, message_);
  }

  bool operator==(const Status&) const = default;

 private:
  Status(Code code, std::string_view msg, std::string_view msg2) : code_(code) {
    message_.reserve(msg.size() + msg2.size() + 2);
    message_.append(msg);
    if (!msg.empty() && !msg2.empty()) message_.append(": ");
    message_.append(msg2);
  }

  Code code_ = Code::kOk;
  std::string message_;
};

// A value of type T, or the Status saying why there is none.
//
//   Result<int> r = ParsePort(text);      // built from a T (success) or a non-OK Status (failure)
//   if (!r.ok()) return r.status();
//   use(*r);
//
// Our own rather than boost::system::result<T, Status>: that one's value() throws (it would need a
// throw_exception_from_error overload for Status, and this codebase does not use exceptions for expected
// failures), it is not [[nodiscard]], and its error() of a success is a default Status that reads as OK
// by accident. Here status() is always meaningful (OK when there is a value) and misuse asserts.
template <typename T>
class [[nodiscard]] Result {
  static_assert(!std::is_same_v<std::remove_cvref_t<T>, Status>, "use Status itself");
  static_assert(!std::is_reference_v<T>, "Result holds values");

 public:
  // Success: from anything a T can be implicitly built from. Implicit so that `return value;` works.
  template <typename U = T, typename = std::enable_if_t<!std::is_same_v<std::remove_cvref_t<U>, Result> &&
                                                        !std::is_same_v<std::remove_cvref_t<U>, Status> &&
                                                        std::is_convertible_v<U&&, T>>>
  Result(U&& value) : value_(std::forward<U>(value)) {}  // NOLINT(google-explicit-constructor)

  // Failure. Implicit so that `return Status::InvalidArgument(...);` works.
  // REQUIRES: !status.ok() (an OK status without a value becomes kInternal, and asserts in debug builds).
  Result(Status status) : status_(std::move(status)) {  // NOLINT(google-explicit-constructor)
    assert(!status_.ok() && "Result built from an OK Status without a value");
    if (status_.ok()) status_ = Status::Internal("Result built from an OK Status without a value");
  }

  [[nodiscard]] bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  // OK when there is a value.
  [[nodiscard]] const Status& status() const& { return status_; }
  [[nodiscard]] Status status() && { return std::move(status_); }

  // REQUIRES: ok().
  [[nodiscard]] T& value() & {
    assert(ok());
    return *value_;
  }
  [[nodiscard]] const T& value() const& {
    assert(ok());
    return *value_;
  }
  [[nodiscard]] T&& value() && {
    assert(ok());
    return std::move(*value_);
  }
  // The value, or `fallback` when there is none.
  template <typename U>
  [[nodiscard]] T value_or(U&& fallback) const& {
    return ok() ? *value_ : static_cast<T>(std::forward<U>(fallback));
  }
  template <typename U>
  [[nodiscard]] T value_or(U&& fallback) && {
    return ok() ? std::move(*value_) : static_cast<T>(std::forward<U>(fallback));
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  Status status_;           // OK iff value_ holds a value
  std::optional<T> value_;  // set on success
};

}  // namespace ringlimit

#endif  // RINGLIMIT_BASE_STATUS_H_
