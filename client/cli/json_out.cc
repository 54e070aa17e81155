#include "client/cli/json_out.h"

#include <boost/json/serialize.hpp>
#include <cmath>
#include <cstdio>

namespace ringlimit::cli {
namespace {

void Write(const boost::json::value& v, std::string* out) {
  switch (v.kind()) {
    case boost::json::kind::double_: {
      const double d = v.get_double();
      if (!std::isfinite(d)) {
        out->append("null");
        return;
      }
      char text[64];
      std::snprintf(text, sizeof(text), "%.6f", d);
      std::string s = text;
      if (s.find('.') != std::string::npos) {
        while (s.back() == '0') s.pop_back();
        if (s.back() == '.') s.pop_back();
      }
      if (s == "-0") s.erase(0, 1);  // (not s = "0": GCC 12 -Wrestrict false positive under ASan)
      out->append(s);
      return;
    }
    case boost::json::kind::array: {
      out->push_back('[');
      bool first = true;
      for (const boost::json::value& e : v.get_array()) {
        if (!first) out->push_back(',');
        first = false;
        Write(e, out);
      }
      out->push_back(']');
      return;
    }
    case boost::json::kind::object: {
      out->push_back('{');
      bool first = true;
      for (const auto& [key, e] : v.get_object()) {
        if (!first) out->push_back(',');
        first = false;
        out->append(boost::json::serialize(boost::json::value(key)));
        out->push_back(':');
        Write(e, out);
      }
      out->push_back('}');
      return;
    }
    default:
      out->append(boost::json::serialize(v));
  }
}

}  // namespace

std::string ToJson(const boost::json::value& value) {
  std::string out;
  Write(value, &out);
  return out;
}

}  // namespace ringlimit::cli
