#include "supervisor/classify/symbolizer.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <sys/stat.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "tests/unit/scratch_dir.h"

// Symbolization targets: real functions of this test binary, kept out of line
// so they have addresses and symbols of their own.
extern "C" __attribute__((noinline)) int pillbox_symbolizer_c_target(int n) {
  volatile int acc = 0;
  for (int i = 0; i < n; ++i) acc = acc + i * 3;
  return acc;
}

namespace pbsymtest {
__attribute__((noinline)) int namespaced_target(int n) {
  volatile int acc = 1;
  for (int i = 0; i < n; ++i) acc = acc * 5 + i;
  return acc;
}
}  // namespace pbsymtest

namespace pillbox {
namespace {

namespace fs = std::filesystem;

struct Location {
  std::string module;
  std::uint64_t offset = 0;
};

// What a crash capture in a child records for `address`: the path of the ELF
// object containing it and the address minus that object's load bias.
Location locate(const void* address) {
  Dl_info info{};
  REQUIRE(dladdr(address, &info) != 0);
  struct Search {
    std::uintptr_t address;
    Location found;
    bool hit = false;
  } search{reinterpret_cast<std::uintptr_t>(address), {}, false};
  dl_iterate_phdr(
      [](dl_phdr_info* object, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        for (int i = 0; i < object->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = object->dlpi_phdr[i];
          const std::uintptr_t start = object->dlpi_addr + ph.p_vaddr;
          if (ph.p_type == PT_LOAD && s->address >= start && s->address < start + ph.p_memsz) {
            const bool main_program = object->dlpi_name == nullptr || object->dlpi_name[0] == '\0';
            s->found.module = main_program ? "/proc/self/exe" : object->dlpi_name;
            s->found.offset = s->address - object->dlpi_addr;
            s->hit = true;
            return 1;
          }
        }
        return 0;
      },
      &search);
  REQUIRE(search.hit);
  return search.found;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

TEST_CASE("symbolizer: functions of the test binary, from .symtab") {
  Symbolizer symbolizer;
  const Location c_target = locate(reinterpret_cast<const void*>(&pillbox_symbolizer_c_target));
  CHECK(c_target.module == "/proc/self/exe");
  CHECK(symbolizer.function_at(c_target.module, c_target.offset, false) == "pillbox_symbolizer_c_target");
  // A return address one past the function's first byte still names it.
  CHECK(symbolizer.function_at(c_target.module, c_target.offset + 1, true) == "pillbox_symbolizer_c_target");

  const Location cpp_target = locate(reinterpret_cast<const void*>(&pbsymtest::namespaced_target));
  CHECK(symbolizer.function_at(cpp_target.module, cpp_target.offset + 2, false) ==
        "pbsymtest::namespaced_target(int)");

  const Location test_case_body = locate(reinterpret_cast<const void*>(&locate));
  CHECK(symbolizer.function_at(test_case_body.module, test_case_body.offset, false) ==
        "pillbox::(anonymous namespace)::locate(void const*)");
}

TEST_CASE("symbolizer: a libc function, from .dynsym") {
  void* getpid_address = dlsym(RTLD_DEFAULT, "getpid");
  REQUIRE(getpid_address != nullptr);
  const Location libc = locate(getpid_address);
  CAPTURE(libc.module);
  REQUIRE(fs::path(libc.module).filename().string().starts_with("libc.so"));
  Symbolizer symbolizer;
  // libc also exports the alias __getpid at the same address; the public name wins.
  CHECK(symbolizer.function_at(libc.module, libc.offset, false) == "getpid");
}

TEST_CASE("symbolizer: symbolize() treats frames after the first as return addresses") {
  const Location target = locate(reinterpret_cast<const void*>(&pillbox_symbolizer_c_target));
  Symbolizer symbolizer;
  const auto frames = symbolizer.symbolize({
      RawFrame{target.module, target.offset},
      RawFrame{target.module, target.offset + 1},
      RawFrame{"", 0x1234},
      RawFrame{"/nonexistent/libnothing.so", 0x10},
  });
  REQUIRE(frames.size() == 4);
  CHECK(frames[0].function == "pillbox_symbolizer_c_target");
  CHECK(frames[0].module == target.module);
  CHECK(frames[0].offset == target.offset);
  CHECK(frames[1].function == "pillbox_symbolizer_c_target");
  CHECK(frames[2].function == "");
  CHECK(frames[2].offset == 0x1234);
  CHECK(frames[3].function == "");
  CHECK(symbolizer.symbolize({}).empty());
  // The faulting pc is looked up as is: at a function's first byte, the
  // offset before it belongs to something else.
  CHECK(symbolizer.symbolize({RawFrame{target.module, target.offset}, RawFrame{target.module, 1}})[1].function ==
        "");
}

TEST_CASE("symbolizer: modules that are not usable ELF files yield no names") {
  test::ScratchDir dir{"symbolizer"};
  Symbolizer symbolizer;
  CHECK(symbolizer.function_at("/nonexistent/path/libfoo.so", 0x1000, false) == "");
  CHECK(symbolizer.function_at("/nonexistent/path/libfoo.so", 0x1000, false) == "");  // cached miss
  CHECK(symbolizer.function_at(dir.path, 0x1000, false) == "");               // a directory
  CHECK(symbolizer.function_at("/dev/null", 0x1000, false) == "");
  const std::string fifo = dir.path + "/fifo";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  CHECK(symbolizer.function_at(fifo, 0x1000, false) == "");  // must not block

  std::string noise(64 * 1024, '\0');
  std::uint64_t x = 88172645463325252ull;
  for (char& c : noise) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  CHECK(symbolizer.function_at(dir.write("random.bin", noise), 0x100, false) == "");
  CHECK(symbolizer.function_at(dir.write("elf-magic.bin", "\x7f" "ELF" + noise), 0x100, false) == "");
  CHECK(symbolizer.function_at(dir.write("empty.bin", ""), 0, false) == "");
}

TEST_CASE("symbolizer: truncated copies of a real ELF file yield no names") {
  const Location target = locate(reinterpret_cast<const void*>(&pillbox_symbolizer_c_target));
  const std::string exe = read_file("/proc/self/exe");
  REQUIRE(exe.size() > 4096);
  test::ScratchDir dir{"symbolizer"};
  {
    Symbolizer symbolizer;
    const std::string whole = dir.write("whole", exe);
    REQUIRE(symbolizer.function_at(whole, target.offset, false) == "pillbox_symbolizer_c_target");
  }
  for (std::size_t length : {std::size_t{0}, std::size_t{4}, std::size_t{63}, std::size_t{64}, std::size_t{4096},
                             exe.size() / 2, exe.size() - 64, exe.size() - 1}) {
    CAPTURE(length);
    Symbolizer symbolizer;
    const std::string path = dir.write("cut" + std::to_string(length), exe.substr(0, length));
    CHECK(symbolizer.function_at(path, target.offset, false) == "");
  }
}

// A minimal ELF64 file with just section headers and symbol tables, so the
// tests control every symbol and can corrupt every field.
class ElfBuilder {
 public:
  struct Sym {
    std::string name;
    unsigned type = STT_FUNC;
    unsigned bind = STB_GLOBAL;
    std::uint64_t value = 0;
    std::uint64_t size = 0;
    std::uint16_t shndx = 1;
    std::uint32_t name_override = 0;  // nonzero: a raw (possibly bogus) st_name
  };

  // Adds a symbol table section of `type` and its string table.
  void add_table(Elf64_Word type, const std::vector<Sym>& syms) {
    std::string strtab(1, '\0');
    std::string table(sizeof(Elf64_Sym), '\0');  // index 0: the null symbol
    for (const Sym& s : syms) {
      Elf64_Sym sym{};
      sym.st_name = s.name_override ? s.name_override : static_cast<Elf64_Word>(strtab.size());
      strtab += s.name;
      strtab += '\0';
      sym.st_info = static_cast<unsigned char>(ELF64_ST_INFO(s.bind, s.type));
      sym.st_shndx = s.shndx;
      sym.st_value = s.value;
      sym.st_size = s.size;
      table.append(reinterpret_cast<const char*>(&sym), sizeof sym);
    }
    // File indices count the null and .text sections before ours.
    const auto strtab_index = static_cast<Elf64_Word>(sections_.size() + 3);
    sections_.push_back(Section{type, strtab_index, sizeof(Elf64_Sym), table});
    sections_.push_back(Section{SHT_STRTAB, 0, 0, strtab});
  }

  std::string build() const {
    std::string file(sizeof(Elf64_Ehdr), '\0');
    std::vector<Elf64_Shdr> headers(1);  // index 0: the null section
    Elf64_Shdr text{};                  // index 1: where the functions live
    text.sh_type = SHT_PROGBITS;
    text.sh_addr = 0x1000;
    text.sh_size = 0x4000;
    headers.push_back(text);
    for (const Section& s : sections_) {
      while (file.size() % 8 != 0) file += '\0';
      Elf64_Shdr h{};
      h.sh_type = s.type;
      h.sh_link = s.link;
      h.sh_entsize = s.entsize;
      h.sh_offset = file.size();
      h.sh_size = s.bytes.size();
      headers.push_back(h);
      file += s.bytes;
    }
    while (file.size() % 8 != 0) file += '\0';
    Elf64_Ehdr eh{};
    std::memcpy(eh.e_ident, ELFMAG, SELFMAG);
    eh.e_ident[EI_CLASS] = ELFCLASS64;
    eh.e_ident[EI_DATA] = ELFDATA2LSB;
    eh.e_ident[EI_VERSION] = EV_CURRENT;
    eh.e_type = ET_DYN;
    eh.e_machine = EM_X86_64;
    eh.e_version = EV_CURRENT;
    eh.e_ehsize = sizeof(Elf64_Ehdr);
    eh.e_shentsize = sizeof(Elf64_Shdr);
    eh.e_shnum = static_cast<Elf64_Half>(headers.size());
    eh.e_shoff = file.size();
    std::memcpy(file.data(), &eh, sizeof eh);
    file.append(reinterpret_cast<const char*>(headers.data()), headers.size() * sizeof(Elf64_Shdr));
    return file;
  }

 private:
  struct Section {
    Elf64_Word type;
    Elf64_Word link;  // file index of the string table
    std::uint64_t entsize;
    std::string bytes;
  };
  std::vector<Section> sections_;
};

const std::vector<ElfBuilder::Sym> kSymbols = {
    {.name = "alpha", .value = 0x1000, .size = 0x10},
    {.name = "beta", .value = 0x1010, .size = 0},  // size 0: extends to the next symbol
    {.name = "__gamma_alias", .value = 0x1100, .size = 0x20},
    {.name = "gamma", .bind = STB_WEAK, .value = 0x1100, .size = 0x20},
    {.name = "data_object", .type = STT_OBJECT, .value = 0x2000, .size = 0x10},
    {.name = "_ZN2ns5deltaEv", .value = 0x3000, .size = 8},
    {.name = "imported", .value = 0, .size = 0, .shndx = SHN_UNDEF},
    {.name = "resolver", .type = STT_GNU_IFUNC, .value = 0x3100, .size = 4},
    {.name = "bogus_name", .value = 0x3200, .size = 4, .name_override = 0xfffffff0},
    {.name = "last_unsized", .value = 0x3300, .size = 0},
};

void check_synthetic_lookups(const std::string& path) {
  Symbolizer s;
  CHECK(s.function_at(path, 0xfff, false) == "");
  CHECK(s.function_at(path, 0x1000, false) == "alpha");
  CHECK(s.function_at(path, 0x100f, false) == "alpha");
  CHECK(s.function_at(path, 0x1010, true) == "alpha");
  CHECK(s.function_at(path, 0x1010, false) == "beta");
  CHECK(s.function_at(path, 0x10ff, false) == "beta");
  CHECK(s.function_at(path, 0x1100, false) == "gamma");
  CHECK(s.function_at(path, 0x111f, false) == "gamma");
  CHECK(s.function_at(path, 0x1120, false) == "");
  CHECK(s.function_at(path, 0x2000, false) == "");
  CHECK(s.function_at(path, 0x3004, false) == "ns::delta()");
  CHECK(s.function_at(path, 0x3008, false) == "");
  CHECK(s.function_at(path, 0x3100, false) == "resolver");
  CHECK(s.function_at(path, 0x3200, false) == "");
  CHECK(s.function_at(path, 0x3300, false) == "last_unsized");
  CHECK(s.function_at(path, 0x3301, false) == "");
  CHECK(s.function_at(path, 0, false) == "");
  CHECK(s.function_at(path, 0, true) == "");
}

TEST_CASE("symbolizer: synthetic ELF files") {
  test::ScratchDir dir{"symbolizer"};
  SUBCASE(".symtab") {
    ElfBuilder elf;
    elf.add_table(SHT_SYMTAB, kSymbols);
    check_synthetic_lookups(dir.write("symtab.so", elf.build()));
  }
  SUBCASE(".dynsym only") {
    ElfBuilder elf;
    elf.add_table(SHT_DYNSYM, kSymbols);
    check_synthetic_lookups(dir.write("dynsym.so", elf.build()));
  }
  SUBCASE("a .symtab without functions falls back to .dynsym") {
    ElfBuilder elf;
    elf.add_table(SHT_SYMTAB, {{.name = "only_data", .type = STT_OBJECT, .value = 0x1000, .size = 0x100}});
    elf.add_table(SHT_DYNSYM, kSymbols);
    check_synthetic_lookups(dir.write("fallback.so", elf.build()));
  }
}

TEST_CASE("symbolizer: corrupted header fields are rejected, not followed") {
  ElfBuilder builder;
  builder.add_table(SHT_SYMTAB, kSymbols);
  const std::string good = builder.build();
  Elf64_Ehdr eh;
  std::memcpy(&eh, good.data(), sizeof eh);
  auto shdr_at = [&](std::size_t index) { return eh.e_shoff + index * sizeof(Elf64_Shdr); };
  const std::size_t symtab = 2;

  struct Corruption {
    const char* what;
    std::size_t offset;
    std::uint64_t value;
    std::size_t width;
  };
  const Corruption corruptions[] = {
      {"e_shoff past the end", offsetof(Elf64_Ehdr, e_shoff), 1ull << 40, 8},
      {"e_shoff overflowing", offsetof(Elf64_Ehdr, e_shoff), ~0ull - 8, 8},
      {"e_shnum too large", offsetof(Elf64_Ehdr, e_shnum), 0xffff, 2},
      {"e_shentsize wrong", offsetof(Elf64_Ehdr, e_shentsize), 32, 2},
      {"32-bit class", EI_CLASS, ELFCLASS32, 1},
      {"big endian", EI_DATA, ELFDATA2MSB, 1},
      {"symtab offset past the end", shdr_at(symtab) + offsetof(Elf64_Shdr, sh_offset), 1ull << 40, 8},
      {"symtab size overflowing", shdr_at(symtab) + offsetof(Elf64_Shdr, sh_size), ~0ull, 8},
      {"symtab link out of range", shdr_at(symtab) + offsetof(Elf64_Shdr, sh_link), 0x7fffffff, 4},
      {"symtab link to a non-strtab", shdr_at(symtab) + offsetof(Elf64_Shdr, sh_link), 1, 4},
      {"symtab entsize wrong", shdr_at(symtab) + offsetof(Elf64_Shdr, sh_entsize), 7, 8},
      {"strtab offset overflowing", shdr_at(symtab + 1) + offsetof(Elf64_Shdr, sh_offset), ~0ull - 2, 8},
      {"strtab size huge", shdr_at(symtab + 1) + offsetof(Elf64_Shdr, sh_size), 1ull << 62, 8},
  };
  test::ScratchDir dir{"symbolizer"};
  for (const Corruption& c : corruptions) {
    CAPTURE(c.what);
    std::string bad = good;
    REQUIRE(c.offset + c.width <= bad.size());
    std::memcpy(bad.data() + c.offset, &c.value, c.width);  // little-endian host
    Symbolizer symbolizer;
    CHECK(symbolizer.function_at(dir.write("corrupt.so", bad), 0x1000, false) == "");
  }
}

TEST_CASE("symbolizer: thousands of random mutations never crash it") {
  ElfBuilder builder;
  builder.add_table(SHT_SYMTAB, kSymbols);
  const std::string good = builder.build();
  const std::size_t headers_start = good.size() - 5 * sizeof(Elf64_Shdr);
  test::ScratchDir dir{"symbolizer"};
  const std::string path = dir.path + "/mutant.so";
  std::uint64_t x = 0x2545f4914f6cdd1dull;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  int named = 0;
  for (int round = 0; round < 3000; ++round) {
    std::string bad = good;
    for (int edits = 1 + static_cast<int>(next() % 4); edits > 0; --edits) {
      // Aim half of the edits at the ELF and section headers, where offsets live.
      const bool headers = next() % 2 == 0;
      const std::size_t at = headers ? (next() % 2 ? next() % sizeof(Elf64_Ehdr)
                                                   : headers_start + next() % (good.size() - headers_start))
                                     : next() % bad.size();
      bad[at] = static_cast<char>(next());
    }
    if (next() % 8 == 0) bad.resize(next() % bad.size());
    const std::string written = dir.write("mutant.so", bad);
    REQUIRE(written == path);
    Symbolizer symbolizer;  // fresh: the cache is per path
    for (std::uint64_t offset : {0x1000ull, 0x1010ull, 0x1100ull, 0x3004ull, 0x3300ull, ~0ull}) {
      if (!symbolizer.function_at(path, offset, false).empty()) ++named;
    }
  }
  CHECK(named > 0);  // mutations outside the tables leave the symbols readable
}

}  // namespace
}  // namespace pillbox
