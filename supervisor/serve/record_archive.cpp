#include "supervisor/serve/record_archive.h"

#include <archive.h>
#include <archive_entry.h>

#include <memory>

namespace pillbox::serve {
namespace {

struct ArchiveFree {
  void operator()(archive* a) const { archive_write_free(a); }
};
struct EntryFree {
  void operator()(archive_entry* e) const { archive_entry_free(e); }
};

// libarchive's write callback: every block appended to the caller's string.
la_ssize_t append(archive*, void* out, const void* buffer, size_t length) {
  static_cast<std::string*>(out)->append(static_cast<const char*>(buffer), length);
  return static_cast<la_ssize_t>(length);
}

Error failed(archive* a, const std::string& what) {
  const char* why = archive_error_string(a);
  return Error{"cannot write the bundle's archive (" + what + "): " + (why ? why : "unknown error")};
}

}  // namespace

Expected<std::string> bundle_tar_gz(const std::string& top, const std::vector<BundleFile>& files,
                                    std::int64_t mtime_s) {
  std::unique_ptr<archive, ArchiveFree> a(archive_write_new());
  if (!a) return Error{"cannot write the bundle's archive: out of memory"};
  std::string out;
  if (archive_write_set_format_ustar(a.get()) != ARCHIVE_OK) return failed(a.get(), "ustar");
  if (archive_write_add_filter_gzip(a.get()) != ARCHIVE_OK) return failed(a.get(), "gzip");
  // Blocks as they come: no padding of the compressed stream to 10 KiB.
  archive_write_set_bytes_in_last_block(a.get(), 1);
  if (archive_write_open2(a.get(), &out, nullptr, append, nullptr, nullptr) != ARCHIVE_OK) {
    return failed(a.get(), "open");
  }
  std::unique_ptr<archive_entry, EntryFree> entry(archive_entry_new());
  if (!entry) return Error{"cannot write the bundle's archive: out of memory"};
  auto header = [&](const std::string& path, mode_t type, mode_t mode, std::int64_t size) {
    archive_entry_clear(entry.get());
    archive_entry_set_pathname(entry.get(), path.c_str());
    archive_entry_set_filetype(entry.get(), type);
    archive_entry_set_perm(entry.get(), mode);
    archive_entry_set_size(entry.get(), size);
    archive_entry_set_mtime(entry.get(), static_cast<time_t>(mtime_s), 0);
    return archive_write_header(a.get(), entry.get()) == ARCHIVE_OK;
  };
  if (!header(top + "/", AE_IFDIR, 0700, 0)) return failed(a.get(), top + "/");
  for (const BundleFile& f : files) {
    const std::string path = top + "/" + f.name;
    if (!header(path, AE_IFREG, f.mode, static_cast<std::int64_t>(f.bytes.size()))) return failed(a.get(), path);
    if (!f.bytes.empty() &&
        archive_write_data(a.get(), f.bytes.data(), f.bytes.size()) != static_cast<la_ssize_t>(f.bytes.size())) {
      return failed(a.get(), path);
    }
  }
  if (archive_write_close(a.get()) != ARCHIVE_OK) return failed(a.get(), "close");
  return out;
}

}  // namespace pillbox::serve
