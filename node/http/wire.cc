#include "node/http/wire.h"

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/status.hpp>

#include "node/http/handler.h"  // AppendHttpResponse

namespace ringlimit::node {

std::optional<std::string_view> RequestHead::Field(std::string_view name) const {
  std::optional<std::string_view> found;
  ForEachField([&](std::string_view field, std::string_view value) {
    if (!found && boost::beast::iequals(field, name)) found = value;
  });
  return found;
}

WireResponse::WireResponse(std::string& out, unsigned status, std::string_view reason, size_t expect)
    : out_(out, expect), status_(status) {
  if (reason.empty()) {
    reason = boost::beast::http::obsolete_reason(static_cast<boost::beast::http::status>(status));
  }
  out_.Put("HTTP/1.1 ");
  out_.Uint(status);
  out_.Put(' ');
  out_.Put(reason);
  out_.Put("\r\n");
}

void WireResponse::Finish(std::string_view body, bool head, bool close) {
  const bool bodiless = status_ / 100 == 1 || status_ == 204 || status_ == 304;
  if (!bodiless) {
    out_.Put("Content-Length: ");
    out_.Uint(body.size());
    out_.Put("\r\n");
  }
  if (close) out_.Put("Connection: close\r\n");
  out_.Put("\r\n");
  if (!head && !bodiless) out_.Put(body);
  out_.Close();
}

void AppendWireResponse(std::string_view response, bool close, std::string& out) {
  const size_t end_of_fields = response.find("\r\n\r\n");
  if (!close || end_of_fields == std::string_view::npos) {
    out.append(response);
    return;
  }
  // Between the last field's CRLF and the empty line's.
  const size_t at = end_of_fields + 2;
  out.append(response.substr(0, at));
  out.append("Connection: close\r\n");
  out.append(response.substr(at));
}

void AppendHttpResponse(const HttpResponse& response, bool head, bool close, std::string& out) {
  // Room for the whole response made once (96: the status line's and the framing's constant parts and
  // numbers).
  const std::optional<std::string_view> block = response.wire();
  size_t bound = 96 + response.reason().size() + response.body().size();
  if (block) {
    bound += block->size();
  } else {
    for (const auto& field : response) bound += field.name_string().size() + field.value().size() + 4;
  }
  WireResponse wire(out, response.result_int(), response.reason(), bound);
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
