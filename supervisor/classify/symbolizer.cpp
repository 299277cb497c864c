#include "supervisor/classify/symbolizer.h"

#include <cxxabi.h>
#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>

#include "shared/unique_fd.h"
#include "supervisor/io/kept_out_of_inputs.h"
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <new>
#include <string_view>
#include <tuple>

namespace pillbox {
namespace {

constexpr std::uint64_t kMaxModuleBytes = std::uint64_t{1} << 30;
// Largest symbol or string table loaded (big C++ binaries stay well below).
constexpr std::uint64_t kMaxTableBytes = std::uint64_t{128} << 20;
// Paths come from hostile children; bound how many distinct ones we remember.
constexpr std::size_t kMaxCachedModules = 512;

// An open ELF file read with pread: unlike mmap, a file truncated while we
// read it yields a short read instead of SIGBUS in the supervisor.
class ElfFile {
 public:
  bool open(const std::string& path) {
    // Refuse anything but a regular file before opening it: opening a FIFO
    // would block and opening a device can have side effects. Nor the
    // store's database a child names as a module (its close would drop
    // this process's SQLite locks: kept_out_of_inputs.h), whatever a
    // symlink there points to when.
    struct stat st {};
    fd_ = open_regular_unless_kept_out(path, st);
    if (!fd_.valid()) return false;
    // The path comes from a possibly hostile child. Only files that a
    // sandboxed user cannot have written are read: owned by root or by us,
    // writable by nobody else. A crafted "library" with a gigabyte symbol
    // table in /tmp stays unsymbolized instead of filling our memory.
    if ((st.st_uid != 0 && st.st_uid != ::geteuid()) || (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) return false;
    size_ = static_cast<std::uint64_t>(st.st_size);
    return size_ <= kMaxModuleBytes;
  }

  // Reads exactly [offset, offset + len) of the file into `out`.
  bool read(std::uint64_t offset, std::uint64_t len, void* out) const {
    if (offset > size_ || len > size_ - offset) return false;
    auto* p = static_cast<char*>(out);
    while (len > 0) {
      const ssize_t n = ::pread(fd_.get(), p, len, static_cast<off_t>(offset));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      p += n;
      offset += static_cast<std::uint64_t>(n);
      len -= static_cast<std::uint64_t>(n);
    }
    return true;
  }

  template <class T>
  bool read(std::uint64_t offset, T& out) const {
    return read(offset, sizeof(T), &out);
  }

  std::optional<std::string> read_bytes(std::uint64_t offset, std::uint64_t len) const {
    if (offset > size_ || len > size_ - offset) return std::nullopt;
    std::string bytes(len, '\0');
    if (!read(offset, len, bytes.data())) return std::nullopt;
    return bytes;
  }

  std::uint64_t size() const { return size_; }

 private:
  UniqueFd fd_;
  std::uint64_t size_ = 0;
};

struct Symbol {
  std::uint64_t address = 0;
  std::uint64_t size = 0;
  std::uint32_t name = 0;  // offset into the module's string table
  unsigned char binding = 0;
};

std::size_t leading_underscores(std::string_view name) {
  return std::min(name.find_first_not_of('_'), name.size());
}

std::string demangle(const char* name) {
  if (std::strncmp(name, "_Z", 2) != 0) return name;
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return name;
  std::string result(demangled);
  std::free(demangled);
  return result;
}

}  // namespace

// The function symbols of one ELF file, sorted by address, one per address.
struct Symbolizer::Module {
  std::string strtab;  // ends with '\0', so every name offset below it is a C string
  std::vector<Symbol> symbols;

  // Reads the symbol table of section type `type` (SHT_SYMTAB or SHT_DYNSYM).
  // False when absent or malformed; then `symbols` is left empty.
  bool load_table(const ElfFile& file, const std::vector<Elf64_Shdr>& sections, Elf64_Word type);
  std::string lookup(std::uint64_t address) const;
};

bool Symbolizer::Module::load_table(const ElfFile& file, const std::vector<Elf64_Shdr>& sections,
                                    Elf64_Word type) {
  const auto table = std::find_if(sections.begin(), sections.end(),
                                  [&](const Elf64_Shdr& s) { return s.sh_type == type; });
  if (table == sections.end() || table->sh_link >= sections.size()) return false;
  if (table->sh_entsize != 0 && table->sh_entsize != sizeof(Elf64_Sym)) return false;
  const Elf64_Shdr& names = sections[table->sh_link];
  if (names.sh_type != SHT_STRTAB) return false;
  if (names.sh_size > kMaxTableBytes || table->sh_size > kMaxTableBytes) return false;

  auto strings = file.read_bytes(names.sh_offset, names.sh_size);
  auto raw = file.read_bytes(table->sh_offset, table->sh_size);
  if (!strings || !raw || strings->empty()) return false;
  strtab = std::move(*strings);
  strtab.back() = '\0';

  symbols.clear();
  const std::size_t count = raw->size() / sizeof(Elf64_Sym);
  for (std::size_t i = 0; i < count; ++i) {
    Elf64_Sym sym;
    std::memcpy(&sym, raw->data() + i * sizeof sym, sizeof sym);
    const unsigned type_bits = ELF64_ST_TYPE(sym.st_info);
    if ((type_bits != STT_FUNC && type_bits != STT_GNU_IFUNC) || sym.st_value == 0 ||
        sym.st_shndx == SHN_UNDEF || sym.st_name >= strtab.size() || strtab[sym.st_name] == '\0') {
      continue;
    }
    symbols.push_back(Symbol{sym.st_value, sym.st_size, sym.st_name,
                             static_cast<unsigned char>(ELF64_ST_BIND(sym.st_info))});
  }
  // Aliases share an address (getpid/__getpid, raise/gsignal): keep the one
  // with a size (~size sorts larger first), then the public-looking name,
  // then the global one.
  auto rank = [&](const Symbol& s) {
    const std::string_view name = strtab.c_str() + s.name;
    return std::make_tuple(s.address, ~s.size, leading_underscores(name),
                           s.binding != STB_GLOBAL, name);
  };
  std::sort(symbols.begin(), symbols.end(),
            [&](const Symbol& a, const Symbol& b) { return rank(a) < rank(b); });
  symbols.erase(std::unique(symbols.begin(), symbols.end(),
                            [](const Symbol& a, const Symbol& b) { return a.address == b.address; }),
                symbols.end());
  return !symbols.empty();
}

std::string Symbolizer::Module::lookup(std::uint64_t address) const {
  auto it = std::upper_bound(symbols.begin(), symbols.end(), address,
                             [](std::uint64_t a, const Symbol& s) { return a < s.address; });
  if (it == symbols.begin()) return "";
  const auto next = it;
  const Symbol& sym = *--it;
  // A size-0 symbol (hand-written assembly) extends up to the next symbol.
  const std::uint64_t limit =
      sym.size != 0 ? sym.size : (next != symbols.end() ? next->address - sym.address : 1);
  if (address - sym.address >= limit) return "";
  return demangle(strtab.c_str() + sym.name);
}

Symbolizer::Symbolizer() = default;
Symbolizer::~Symbolizer() = default;

const Symbolizer::Module* Symbolizer::load(const std::string& path) {
  if (auto cached = cache_.find(path); cached != cache_.end()) return cached->second.get();
  if (cache_.size() >= kMaxCachedModules) cache_.clear();

  std::unique_ptr<Module> module;
  ElfFile file;
  Elf64_Ehdr header;
  if (file.open(path) && file.read(0, header) &&
      std::memcmp(header.e_ident, ELFMAG, SELFMAG) == 0 &&
      header.e_ident[EI_CLASS] == ELFCLASS64 && header.e_ident[EI_DATA] == ELFDATA2LSB &&
      header.e_shentsize == sizeof(Elf64_Shdr)) {
    // e_shnum is bounded by 16 bits; read() checks the table fits in the file.
    std::vector<Elf64_Shdr> sections(header.e_shnum);
    if (!sections.empty() &&
        file.read(header.e_shoff, sections.size() * sizeof(Elf64_Shdr), sections.data())) {
      module = std::make_unique<Module>();
      // A .symtab with no functions (partly stripped) is no better than none.
      try {
        if (!module->load_table(file, sections, SHT_SYMTAB) &&
            !module->load_table(file, sections, SHT_DYNSYM)) {
          module.reset();
        }
      } catch (const std::bad_alloc&) {
        module.reset();  // tables of up to 1 GiB: treat like an unreadable module
      }
    }
  }
  // A module that failed stays cached as nullptr so we do not retry it per frame.
  return cache_.emplace(path, std::move(module)).first->second.get();
}

std::string Symbolizer::function_at(const std::string& module_path, std::uint64_t offset,
                                    bool is_return_address) {
  if (module_path.empty()) return "";
  // A return address points just past the call; the call itself is one byte
  // earlier and may belong to a different function when the call is the last
  // instruction of a noreturn path.
  if (is_return_address) {
    if (offset == 0) return "";
    --offset;
  }
  const Module* module = load(module_path);
  return module ? module->lookup(offset) : "";
}

std::vector<SymbolizedFrame> Symbolizer::symbolize(const std::vector<RawFrame>& frames) {
  std::vector<SymbolizedFrame> out;
  out.reserve(frames.size());
  for (std::size_t i = 0; i < frames.size(); ++i) {
    out.push_back(SymbolizedFrame{frames[i].module, frames[i].offset,
                                  function_at(frames[i].module, frames[i].offset, i > 0)});
  }
  return out;
}

}  // namespace pillbox
