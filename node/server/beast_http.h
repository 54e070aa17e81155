// Boost.Beast's HTTP headers, included with GCC 12's false -Wmaybe-uninitialized in them silenced: with the
// sanitizers (scripts/build --asan) GCC reports it inside Beast's request parser
// (basic_parser::content_length returning boost::none) wherever the parser is inlined. The diagnostic state
// is per source location, so the warning is silenced for these headers' lines only, and only if this header
// is the first to include them in a source file: include it first (before the file's own header when that one
// includes Beast), after a comment line so that clang-format keeps it there. The one place this pragma block
// is written.
#ifndef RINGLIMIT_NODE_SERVER_BEAST_HTTP_H_
#define RINGLIMIT_NODE_SERVER_BEAST_HTTP_H_

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/read_size.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#endif  // RINGLIMIT_NODE_SERVER_BEAST_HTTP_H_
