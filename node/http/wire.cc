#include "node/http/wire.h"

#include <boost/beast/http/status.hpp>
#include <charconv>

#include "node/http/handler.h"  // AppendHttpResponse

namespace ringlimit::node {

namespace {

char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool EqualsIgnoringCase(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (Lower(a[i]) != Lower(b[i])) return false;
  }
  return true;
}

void AppendDecimal(std::string& out, uint64_t v) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, end);
}

}  // namespace

std::optional<std::string_view> RequestHead::Field(std::string_view name) const {
  std::string_view rest = fields;
  while (!rest.empty()) {
    const size_t eol = rest.find("\r\n");
    std::string_view line = rest.substr(0, eol);
    rest = eol == std::string_view::npos ? std::string_view() : rest.substr(eol + 2);
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos || !EqualsIgnoringCase(line.substr(0, colon), name)) continue;
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && (value.front() == ' ' || value.front() == '\t')) value.remove_prefix(1);
    while (!value.empty() && (value.back() == ' ' || value.back() == '\t')) value.remove_suffix(1);
    return value;
  }
  return std::nullopt;
}

WireResponse::WireResponse(std::string& out, unsigned status, std::string_view reason)
    : out_(out), status_(status) {
  if (reason.empty())
    reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  out_.append("HTTP/1.1 ");
  AppendDecimal(out_, status);
  out_.push_back(' ');
  out_.append(reason);
  out_.append("\r\n");
}

void WireResponse::Field(std::string_view name, std::string_view value) {
  out_.append(name);
  out_.append(": ");
  out_.append(value);
  out_.append("\r\n");
}

void WireResponse::Field(std::string_view name, int64_t value) {
  char buf[24];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  Field(name, std::string_view(buf, static_cast<size_t>(end - buf)));
}

void WireResponse::Finish(std::string_view body, bool head, bool close) {
  const bool bodiless = status_ / 100 == 1 || status_ == 204 || status_ == 304;
  if (!bodiless) {
    out_.append("Content-Length: ");
    AppendDecimal(out_, body.size());
    out_.append("\r\n");
  }
  if (close) out_.append("Connection: close\r\n");
  out_.append("\r\n");
  if (!head && !bodiless) out_.append(body);
}

void AppendHttpResponse(const HttpResponse& response, bool head, bool close, std::string& out) {
  // One reservation for the whole response (96: the status line's and the framing's constant parts and
  // numbers).
  const std::optional<std::string_view> block = response.wire();
  size_t bound = 96 + response.reason().size() + response.body().size();
  if (block) {
    bound += block->size();
  } else {
    for (const auto& field : response) bound += field.name_string().size() + field.value().size() + 4;
  }
  out.reserve(out.size() + bound);
  WireResponse wire(out, response.result_int(), response.reason());
  // The fields in one copy when they are already in wire form (a usual response), else one by one.
  if (block) {
    wire.Fields(*block);
  } else {
    for (const auto& field : response) {
      if (!ResponseFields::IsFraming(field.name())) wire.Field(field.name_string(), field.value());
    }
  }
  wire.Finish(response.body(), head, close);
}

}  // namespace ringlimit::node
