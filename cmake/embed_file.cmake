# Embeds a file in the binary: writes a C++ source defining `const std::string_view <NAME>` in namespace
# <NAMESPACE> with the file's bytes (as an array of byte values, so no content can end a string literal).
#   cmake -DINPUT=page.html -DOUTPUT=page.cc -DNAME=kPage -DNAMESPACE=ringlimit::node::assets -P embed_file.cmake
# Called by add_custom_command at build time: editing the file rebuilds only what embeds it.
file(READ "${INPUT}" hex HEX)
string(LENGTH "${hex}" hex_length)
math(EXPR size "${hex_length} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "'\\\\x\\1'," bytes "${hex}")
file(WRITE "${OUTPUT}"
  "// Generated from ${INPUT} by cmake/embed_file.cmake: do not edit.\n"
  "#include <string_view>\n\n"
  "namespace ${NAMESPACE} {\n\n"
  "extern const std::string_view ${NAME};\n\n"
  "namespace {\n"
  "constexpr char kBytes[${size} + 1] = {\n  ${bytes}'\\0'};\n"
  "}  // namespace\n\n"
  "const std::string_view ${NAME}(kBytes, ${size});\n\n"
  "}  // namespace ${NAMESPACE}\n")
