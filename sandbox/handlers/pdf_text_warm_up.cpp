#include "sandbox/handlers/pdf_text_warm_up.h"

#include <fontconfig/fontconfig.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <poppler-page.h>

namespace pillbox::sandbox {
namespace {

// fontconfig keeps 288 bytes of what it parsed in /etc/fonts where
// LeakSanitizer does not find them, and frees them only in FcFini. A process
// that loaded the configuration and exits normally (the zygote, spawn mode's
// --check, the unit tests, the fuzz harness) would be reported as leaking in
// the sanitizer builds, and exit with LeakSanitizer's code. Forked children
// end with _exit and never run this.
void release_fontconfig_at_exit() {
  static const bool registered = std::atexit([] { FcFini(); }) == 0;
  static_cast<void>(registered);
}

// fontconfig reads its configuration the first time anyone asks it for a
// font, with access, readlink, getdents64, fstatfs and fadvise64 (on
// /etc/fonts and the caches), none of which the strict policy allows. poppler
// asks while extracting text when it draws a form field whose value has
// characters the field's font lacks (Form::getFallbackFontForChar). So the
// configuration is loaded here: FcInit reads it and every directory's
// cache, and where a cache is missing or stale, scans the directory and
// writes the cache where it may (as root, /var/cache/fontconfig; the
// sandbox's environment has no HOME, so never a user's cache). A child never
// scans or writes: fontconfig does not reload by itself (only
// FcInitBringUptoDate looks for changes, and neither fontconfig nor poppler
// calls it), so every child uses what was loaded here.
void load_fontconfig() {
  release_fontconfig_at_exit();
  if (FcInit()) return;
  // FcInit fails only when the configuration and fonts could not be held in
  // memory (a configuration that cannot be read gives fontconfig's built-in
  // one instead). fontconfig would then try again in each child, where it
  // is a seccomp-violation: an empty configuration instead finds no fonts,
  // and poppler goes without a fallback font, as pdftotext does on a host
  // without fonts.
  if (FcConfig* empty = FcConfigCreate(); empty != nullptr) {
    FcConfigSetCurrent(empty);  // takes its own reference
    FcConfigDestroy(empty);
  }
}

// A one-page PDF, its cross-reference table computed from `objects`.
std::string pdf_of(const std::vector<std::string>& objects) {
  std::string pdf = "%PDF-1.4\n";
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < objects.size(); ++i) {
    offsets.push_back(pdf.size());
    pdf += std::to_string(i + 1) + " 0 obj\n" + objects[i] + "\nendobj\n";
  }
  const std::size_t xref = pdf.size();
  pdf += "xref\n0 " + std::to_string(objects.size() + 1) + "\n0000000000 65535 f \n";
  for (const std::size_t offset : offsets) {
    char entry[24];
    std::snprintf(entry, sizeof entry, "%010zu 00000 n \n", offset);
    pdf += entry;
  }
  pdf += "trailer\n<< /Size " + std::to_string(objects.size() + 1) + " /Root 1 0 R >>\nstartxref\n" +
         std::to_string(xref) + "\n%%EOF\n";
  return pdf;
}

// The warm-up document: one word of text in Helvetica, not embedded, and a
// form text field whose value is a Greek capital omega (U+03A9), which the
// field's Helvetica in WinAnsiEncoding cannot show. NeedAppearances makes
// poppler draw the field itself while extracting the page's text, and look
// up a fallback font for the omega through fontconfig: the lookup's one-time
// work (the program name fontconfig reads from /proc/self/exe, the default
// languages, poppler's font tables) is done here.
std::string warm_up_document() {
  const std::string helvetica = "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>";
  const std::string content = "BT /F1 12 Tf 10 60 Td (warm) Tj ET";
  return pdf_of({
      "<< /Type /Catalog /Pages 2 0 R /AcroForm << /Fields [6 0 R] /NeedAppearances true"
      " /DR << /Font << /Helv 5 0 R >> >> /DA (/Helv 0 Tf 0 g) >> >>",
      "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
      "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 200 80] /Resources << /Font << /F1 5 0 R >> >>"
      " /Contents 4 0 R /Annots [6 0 R] >>",
      "<< /Length " + std::to_string(content.size()) + " >>\nstream\n" + content + "\nendstream",
      helvetica,
      "<< /Type /Annot /Subtype /Widget /FT /Tx /T (warm) /V <FEFF03A9> /DA (/Helv 12 Tf 0 g)"
      " /Rect [10 10 190 40] /P 3 0 R /F 4 >>",
  });
}

}  // namespace

Expected<std::unique_ptr<poppler::document>> warm_up_pdf_text() {
  load_fontconfig();
  // poppler reads from the bytes it is given for as long as the document
  // lives, so they must outlive it: a function-local static does.
  static const std::string pdf = warm_up_document();
  std::unique_ptr<poppler::document> doc(
      poppler::document::load_from_raw_data(pdf.data(), static_cast<int>(pdf.size())));
  const std::unique_ptr<poppler::page> page(doc ? doc->create_page(0) : nullptr);
  if (!page) return Error{"handler 'pdf-text': poppler could not load its built-in warm-up PDF"};
  // Extracting the text once also loads what to_utf8 needs (the iconv
  // module) and the time zone.
  page->text().to_utf8();
  return doc;
}

}  // namespace pillbox::sandbox
