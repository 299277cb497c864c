#pragma once
// What poppler and fontconfig do once per process, done in the zygote (in
// spawn mode: before the child confines itself), so that no confined child
// does it under the seccomp allowlist. Part of libpillbox-pdf-text.so.
//
// Traced on the documents of tests/fixtures/pdf/ (strace -f of the children):
// after this warm-up, extracting text makes only syscalls that the strict
// policy allows (reads of font and CMap files with openat, read, lseek,
// newfstatat, close; memory; sysinfo). Without it, the first font lookup in a
// child loaded fontconfig's configuration there: access, readlink,
// getdents64, fstatfs and fadvise64, and the task was a seccomp-violation.
#include <memory>

#include <poppler-document.h>

#include "shared/status.h"

namespace pillbox::sandbox {

// Loads fontconfig's configuration and font cache, then has poppler extract
// the text of a document that takes each lazy path a task can take. Returns
// that document: poppler's global state (GlobalParams, with its scan of the
// encoding directories) lives only while some document does, and must stay
// built for every child. An error means poppler could not read its own
// warm-up document.
Expected<std::unique_ptr<poppler::document>> warm_up_pdf_text();

}  // namespace pillbox::sandbox
