// The forked image: every mapping of the zygote is copied by each task's
// fork and torn down by its exit, so pillbox-sandbox carries libseccomp and
// zlib inside instead of each adding its own mappings; the C++ runtime stays
// shared (CMakeLists.txt, PILLBOX_SANDBOX_STATIC_DEPS, says why).
#include <doctest/doctest.h>

#include <elf.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

namespace {

// DT_NEEDED of a 64-bit ELF file: the shared libraries the loader maps for it.
std::set<std::string> needed_libraries(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > sizeof(Elf64_Ehdr));
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  REQUIRE(std::memcmp(eh.e_ident, ELFMAG, SELFMAG) == 0);
  REQUIRE(eh.e_ident[EI_CLASS] == ELFCLASS64);
  REQUIRE(eh.e_shoff + static_cast<std::size_t>(eh.e_shnum) * sizeof(Elf64_Shdr) <= bytes.size());
  std::vector<Elf64_Shdr> sections(eh.e_shnum);
  std::memcpy(sections.data(), bytes.data() + eh.e_shoff, eh.e_shnum * sizeof(Elf64_Shdr));
  std::set<std::string> out;
  for (const Elf64_Shdr& s : sections) {
    if (s.sh_type != SHT_DYNAMIC) continue;
    REQUIRE(s.sh_link < sections.size());
    const Elf64_Shdr& strtab = sections[s.sh_link];
    REQUIRE(s.sh_offset + s.sh_size <= bytes.size());
    for (std::size_t off = 0; off + sizeof(Elf64_Dyn) <= s.sh_size; off += sizeof(Elf64_Dyn)) {
      Elf64_Dyn d;
      std::memcpy(&d, bytes.data() + s.sh_offset + off, sizeof d);
      if (d.d_tag == DT_NULL) break;
      if (d.d_tag != DT_NEEDED) continue;
      REQUIRE(strtab.sh_offset + d.d_un.d_val < bytes.size());
      out.insert(std::string(bytes.data() + strtab.sh_offset + d.d_un.d_val));
    }
  }
  return out;
}

}  // namespace

TEST_CASE("pillbox-sandbox: the forked image maps no shared library but the C and C++ runtimes and the loader") {
#ifndef PILLBOX_SANDBOX_STATIC_LINKED
  MESSAGE("skipped: a sanitizer build, or a host without libseccomp.a or libz.a: CMake linked the shared "
          "libraries (PILLBOX_SANDBOX_STATIC_DEPS)");
  return;
#endif
  const auto needed = needed_libraries(std::string(PILLBOX_BUILD_DIR) + "/pillbox-sandbox");
  CAPTURE(needed.size());
  for (const std::string& lib : needed) {
    CAPTURE(lib);
    // The loader is mapped for every dynamic executable anyway; the C++
    // runtime is shared with the pdf-text module.
    CHECK((lib == "libc.so.6" || lib.rfind("ld-linux", 0) == 0 || lib == "libstdc++.so.6" ||
           lib == "libgcc_s.so.1" || lib == "libm.so.6"));
    CHECK(lib.find("seccomp") == std::string::npos);
    CHECK(lib.find("libz.") == std::string::npos);
  }
  CHECK(needed.count("libc.so.6") == 1);
}
