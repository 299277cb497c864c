# Turns policies/*.policy into a C++ table so the binaries carry the shipped
# policies and never depend on where they are installed.
separate_arguments(files UNIX_COMMAND "${FILES}")
set(body "// generated from policies/*.policy by tools/embed_policies.cmake; do not edit\n")
string(APPEND body "#include \"shared/embedded_policies.h\"\n\nnamespace pillbox {\n")
string(APPEND body "const std::vector<EmbeddedPolicy>& embedded_policies() {\n  static const std::vector<EmbeddedPolicy> table = {\n")
foreach(f ${files})
  get_filename_component(name "${f}" NAME_WE)
  file(READ "${f}" text)
  string(APPEND body "    {\"${name}\", R\"pbpolicy(${text})pbpolicy\"},\n")
endforeach()
string(APPEND body "  };\n  return table;\n}\n}  // namespace pillbox\n")
file(WRITE "${OUT}.tmp" "${body}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
