// The "pdf-text" handler: poppler's text extraction, page by page, pages
// joined with a form feed (like pdftotext). Malformed PDFs are what crash
// real-world parsers; this handler runs poppler unguarded so pillbox can show
// it contains them.
//
// Built as its own module, libpillbox-pdf-text.so (with pdf_text_warm_up.cpp,
// what poppler and fontconfig do once, before any fork), which the zygote
// loads only when this handler is asked for (pdf_text_loader.cpp): poppler
// brings 22 more libraries, and every library mapped in the zygote is copied
// into each forked child and torn down again when it exits.
#include <climits>
#include <memory>

#include <poppler-document.h>
#include <poppler-global.h>
#include <poppler-page.h>

#include "sandbox/handler.h"
#include "sandbox/handlers/pdf_text_warm_up.h"

namespace pillbox::handlers {

using sandbox::HandlerResult;
using sandbox::HandlerStatus;

// Kept out of line: this frame is the bug site that crash fingerprints name
// (poppler's own frames are a library's and may be dropped).
[[gnu::noinline]] HandlerResult pdf_extract_text(std::string_view pdf, std::size_t max_output) {
  if (pdf.size() > INT_MAX) {
    return {HandlerStatus::kError, {}, "PDF too large for poppler (its length is an int)"};
  }
  // poppler reads straight from the payload, which outlives the document.
  const std::unique_ptr<poppler::document> doc(
      poppler::document::load_from_raw_data(pdf.data(), static_cast<int>(pdf.size())));
  if (!doc) {
    return {HandlerStatus::kError, {}, "not a PDF or unreadable: poppler could not load the document"};
  }
  if (doc->is_locked()) return {HandlerStatus::kError, {}, "encrypted PDF"};

  std::string text;
  for (int i = 0; i < doc->pages(); ++i) {
    if (i > 0) text += '\f';
    const std::unique_ptr<poppler::page> page(doc->create_page(i));
    if (page) {
      const poppler::byte_array utf8 = page->text().to_utf8();
      text.append(utf8.data(), utf8.size());
    }
    if (text.size() > max_output) {
      return {HandlerStatus::kOutputLimit, {},
              "text of the first " + std::to_string(i + 1) + " pages exceeds the cap of " +
                  std::to_string(max_output) + " bytes"};
    }
  }
  return {HandlerStatus::kOk, std::move(text), {}};
}

}  // namespace pillbox::handlers

namespace pillbox::sandbox {
namespace {

void ignore_poppler_message(const std::string& /*message*/, void* /*closure*/) {}

class PdfTextHandler final : public Handler {
 public:
  explicit PdfTextHandler(std::unique_ptr<poppler::document> warm) : warm_(std::move(warm)) {}

  HandlerResult run(std::string_view payload, std::size_t max_output) override {
    return handlers::pdf_extract_text(payload, max_output);
  }

 private:
  // The warm-up document: poppler's global state (GlobalParams) lives only
  // while some document does; holding this one keeps it built in the zygote
  // instead of rebuilt, with its directory scans, in every confined child.
  std::unique_ptr<poppler::document> warm_;
};

Expected<std::unique_ptr<Handler>> make_pdf_text_in_module(const HandlerArgs& args) {
  if (!args.empty()) {
    return Error{"handler 'pdf-text' does not take --arg '" + args.begin()->first + "' (it takes none)"};
  }
  // Malformed input makes poppler chatter on stderr; the handler's result
  // already says what went wrong.
  poppler::set_debug_error_function(ignore_poppler_message, nullptr);

  // Before any fork, so that the one-time work happens here, not under
  // seccomp (pdf_text_warm_up.h).
  auto warm = warm_up_pdf_text();
  if (!warm) return Error{warm.error()};
  return std::unique_ptr<Handler>(std::make_unique<PdfTextHandler>(std::move(*warm)));
}

}  // namespace
}  // namespace pillbox::sandbox

// The module's one entry point, looked up by name (see pdf_text_loader.cpp).
// Both sides are built together from this tree, so C++ types may cross.
extern "C" [[gnu::visibility("default")]] void pillbox_pdf_text_make(
    const pillbox::sandbox::HandlerArgs& args, pillbox::Expected<std::unique_ptr<pillbox::sandbox::Handler>>& out) {
  out = pillbox::sandbox::make_pdf_text_in_module(args);
}
