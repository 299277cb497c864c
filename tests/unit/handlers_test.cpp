// The built-in handlers and the plugin loader, run in-process (no
// confinement): ordinary inputs only. The hostile ones (exponential regexes,
// deep recursion, bombs) belong to the end-to-end tests, under pillbox.
#include <doctest/doctest.h>
#define ZLIB_CONST
#include <zlib.h>

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "sandbox/handler.h"

using namespace pillbox::sandbox;

namespace {

constexpr std::size_t kNoCap = 1 << 20;

// This test binary lives in tests/, not beside the module as pillbox-sandbox
// does: point at this build's module (never at one the environment names).
const bool kPdfModuleFound = ::access(PILLBOX_BUILD_DIR "/libpillbox-pdf-text.so", R_OK) == 0 &&
                             ::setenv("PILLBOX_PDF_TEXT_LIB", PILLBOX_BUILD_DIR "/libpillbox-pdf-text.so", 1) == 0;

std::unique_ptr<Handler> make(const std::string& name, const HandlerArgs& args = {}) {
  REQUIRE(kPdfModuleFound);
  auto handler = make_handler(name, args);
  REQUIRE_MESSAGE(handler.has_value(), handler.error());
  return std::move(handler).value();
}

HandlerResult run(const std::string& name, const HandlerArgs& args, std::string_view payload,
                  std::size_t max_output = kNoCap) {
  return make(name, args)->run(payload, max_output);
}

std::string make_error(const std::string& name, const HandlerArgs& args) {
  auto handler = make_handler(name, args);
  REQUIRE_FALSE(handler.has_value());
  return handler.error();
}

// A minimal PDF with one page per entry of `pages`, each showing its text in
// Helvetica; the xref table's byte offsets are computed as the file is built.
std::string make_pdf(const std::vector<std::string>& pages) {
  std::vector<std::string> objects;  // object i + 1
  std::string kids;
  for (std::size_t i = 0; i < pages.size(); ++i) kids += std::to_string(4 + 2 * i) + " 0 R ";
  objects.push_back("<< /Type /Catalog /Pages 2 0 R >>");
  objects.push_back("<< /Type /Pages /Kids [" + kids + "] /Count " + std::to_string(pages.size()) + " >>");
  objects.push_back("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>");
  for (std::size_t i = 0; i < pages.size(); ++i) {
    const std::string content = "BT /F1 24 Tf 72 700 Td (" + pages[i] + ") Tj ET";
    objects.push_back("<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
                      "/Contents " + std::to_string(5 + 2 * i) + " 0 R >>");
    objects.push_back("<< /Length " + std::to_string(content.size()) + " >>\nstream\n" + content + "\nendstream");
  }

  std::string pdf = "%PDF-1.4\n";
  std::vector<std::size_t> offsets;
  for (std::size_t i = 0; i < objects.size(); ++i) {
    offsets.push_back(pdf.size());
    pdf += std::to_string(i + 1) + " 0 obj\n" + objects[i] + "\nendobj\n";
  }
  const std::size_t xref = pdf.size();
  pdf += "xref\n0 " + std::to_string(objects.size() + 1) + "\n0000000000 65535 f \n";
  for (const std::size_t offset : offsets) {
    char entry[21];
    std::snprintf(entry, sizeof entry, "%010zu 00000 n \n", offset);
    pdf += entry;
  }
  pdf += "trailer\n<< /Size " + std::to_string(objects.size() + 1) + " /Root 1 0 R >>\nstartxref\n" +
         std::to_string(xref) + "\n%%EOF\n";
  return pdf;
}

// Compresses with zlib's deflate; window_bits picks the container as in
// inflate (15 zlib, 31 gzip, -15 raw).
std::string deflate_text(std::string_view text, int window_bits) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, Z_BEST_COMPRESSION, Z_DEFLATED, window_bits, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, text.size()), '\0');
  zs.next_in = reinterpret_cast<const Bytef*>(text.data());
  zs.avail_in = static_cast<uInt>(text.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

const std::string kText = "pillbox keeps poison pills away from the worker.\n"
                          "pillbox keeps poison pills away from the worker.\n";

}  // namespace

TEST_CASE("handlers: the registry names the built-ins and rejects unknown names") {
  CHECK(std::string(builtin_handler_names()) == "echo, regex, pdf-text, inflate");
  CHECK(make_error("nope", {}) ==
        "unknown handler 'nope' (built-in: echo, regex, pdf-text, inflate; or plugin:/path/to/handler.so)");
  CHECK(make_error("plugin:", {}).find("needs a path") != std::string::npos);
}

TEST_CASE("handlers: echo returns the payload, within the output cap") {
  const std::string payload("any\0bytes\xff", 10);
  const HandlerResult ok = run("echo", {}, payload);
  CHECK(ok.status == HandlerStatus::kOk);
  CHECK(ok.output == payload);

  CHECK(run("echo", {}, payload, 9).status == HandlerStatus::kOutputLimit);
  CHECK(make_error("echo", {{"x", "1"}}) == "handler 'echo' does not take --arg 'x' (it takes none)");
}

TEST_CASE("handlers: regex search, match and icase") {
  SUBCASE("search finds the first match anywhere") {
    const HandlerResult r = run("regex", {{"pattern", "b+"}}, "aabbbc");
    CHECK(r.status == HandlerStatus::kOk);
    CHECK(r.output == "{\"matched\":true,\"position\":2,\"length\":3,\"match\":\"bbb\"}\n");
  }
  SUBCASE("no match") {
    CHECK(run("regex", {{"pattern", "z"}}, "aabbbc").output == "{\"matched\":false}\n");
  }
  SUBCASE("match must cover the whole payload") {
    const HandlerArgs args{{"pattern", "a+"}, {"mode", "match"}};
    CHECK(run("regex", args, "aaa").output == "{\"matched\":true,\"position\":0,\"length\":3,\"match\":\"aaa\"}\n");
    CHECK(run("regex", args, "aaab").output == "{\"matched\":false}\n");
  }
  SUBCASE("icase") {
    CHECK(run("regex", {{"pattern", "HELLO"}}, "say hello").output == "{\"matched\":false}\n");
    CHECK(run("regex", {{"pattern", "HELLO"}, {"icase", "yes"}}, "say hello").output ==
          "{\"matched\":true,\"position\":4,\"length\":5,\"match\":\"hello\"}\n");
    CHECK(run("regex", {{"pattern", "HELLO"}, {"icase", "no"}}, "say hello").output == "{\"matched\":false}\n");
  }
  SUBCASE("a result over the cap") {
    CHECK(run("regex", {{"pattern", "a+"}}, "aaa", 10).status == HandlerStatus::kOutputLimit);
  }
}

TEST_CASE("handlers: regex JSON-escapes the match") {
  const std::string payload = "q\"b\\s\n\x01\x1f \xc3\xa9";
  const HandlerResult r = run("regex", {{"pattern", "[\\s\\S]*"}}, payload);
  CHECK(r.output == "{\"matched\":true,\"position\":0,\"length\":" + std::to_string(payload.size()) +
                        ",\"match\":\"q\\\"b\\\\s\\u000a\\u0001\\u001f \xc3\xa9\"}\n");
}

TEST_CASE("handlers: regex argument errors") {
  CHECK(make_error("regex", {}) == "handler 'regex' needs --arg pattern=REGEX");
  CHECK(make_error("regex", {{"pattern", "a"}, {"foo", "1"}}) ==
        "handler 'regex' does not take --arg 'foo' (it takes: pattern, mode, icase)");
  CHECK(make_error("regex", {{"pattern", "a"}, {"mode", "full"}}).find("search or match") != std::string::npos);
  CHECK(make_error("regex", {{"pattern", "a"}, {"icase", "true"}}).find("yes or no") != std::string::npos);

  const std::string invalid = make_error("regex", {{"pattern", "(a"}});
  CHECK(invalid.find("'(a'") != std::string::npos);
  CHECK(invalid.find("mismatched ( and )") != std::string::npos);
}

TEST_CASE("handlers: pdf-text extracts the text of every page") {
  const HandlerResult one = run("pdf-text", {}, make_pdf({"Hello pillbox"}));
  REQUIRE_MESSAGE(one.status == HandlerStatus::kOk, one.message);
  CHECK(one.output.find("Hello pillbox") != std::string::npos);

  const HandlerResult two = run("pdf-text", {}, make_pdf({"First page", "Second page"}));
  REQUIRE_MESSAGE(two.status == HandlerStatus::kOk, two.message);
  const auto form_feed = two.output.find('\f');
  REQUIRE(form_feed != std::string::npos);
  CHECK(two.output.substr(0, form_feed).find("First page") != std::string::npos);
  CHECK(two.output.substr(form_feed).find("Second page") != std::string::npos);

  CHECK(run("pdf-text", {}, make_pdf({"Hello pillbox"}), 5).status == HandlerStatus::kOutputLimit);
}

TEST_CASE("handlers: pdf-text rejects what is not a PDF") {
  const HandlerResult r = run("pdf-text", {}, "this is not a PDF at all");
  CHECK(r.status == HandlerStatus::kError);
  CHECK(r.message == "not a PDF or unreadable: poppler could not load the document");
  CHECK(make_error("pdf-text", {{"pages", "1"}}) == "handler 'pdf-text' does not take --arg 'pages' (it takes none)");
}

TEST_CASE("handlers: pdf-text without its module says what is missing and what to do") {
  const std::string saved = std::getenv("PILLBOX_PDF_TEXT_LIB");
  ::setenv("PILLBOX_PDF_TEXT_LIB", "/nonexistent/libpillbox-pdf-text.so", 1);
  const std::string missing = make_error("pdf-text", {});
  CHECK(missing == "handler 'pdf-text' needs libpillbox-pdf-text.so, which is not installed (looked in: "
                   "/nonexistent/libpillbox-pdf-text.so; set PILLBOX_PDF_TEXT_LIB to its path)");
  // Something that is not the module: a shared object without the entry point.
  ::setenv("PILLBOX_PDF_TEXT_LIB", PILLBOX_BUILD_DIR "/libpillbox-plugin-wordcount.so", 1);
  const std::string wrong = make_error("pdf-text", {});
  CHECK(wrong.find("is not a pillbox pdf-text module (no pillbox_pdf_text_make); rebuild pillbox") != std::string::npos);
  ::setenv("PILLBOX_PDF_TEXT_LIB", "libpillbox-pdf-text.so", 1);
  CHECK(make_error("pdf-text", {}) == "PILLBOX_PDF_TEXT_LIB must be an absolute path (it is 'libpillbox-pdf-text.so')");
  // A module anyone may rewrite is never loaded.
  const std::string copy = "/tmp/pillbox-unit-pdf-module-" + std::to_string(::getpid()) + ".so";
  std::filesystem::copy_file(PILLBOX_BUILD_DIR "/libpillbox-pdf-text.so", copy,
                             std::filesystem::copy_options::overwrite_existing);
  ::chmod(copy.c_str(), 0666);
  ::setenv("PILLBOX_PDF_TEXT_LIB", copy.c_str(), 1);
  CHECK(make_error("pdf-text", {}) == "handler 'pdf-text': refusing to load " + copy + ": it is writable by group or others");
  std::filesystem::remove(copy);
  ::setenv("PILLBOX_PDF_TEXT_LIB", saved.c_str(), 1);
}

TEST_CASE("handlers: inflate decompresses gzip, zlib and raw deflate") {
  for (const int window_bits : {31, 15}) {
    CAPTURE(window_bits);
    const HandlerResult r = run("inflate", {}, deflate_text(kText, window_bits));
    REQUIRE_MESSAGE(r.status == HandlerStatus::kOk, r.message);
    CHECK(r.output == kText);
  }
  CHECK(run("inflate", {{"format", "gzip"}}, deflate_text(kText, 31)).output == kText);
  CHECK(run("inflate", {{"format", "zlib"}}, deflate_text(kText, 15)).output == kText);
  CHECK(run("inflate", {{"format", "raw"}}, deflate_text(kText, -15)).output == kText);
  CHECK(run("inflate", {{"format", "zlib"}}, deflate_text(kText, 31)).status == HandlerStatus::kError);
}

TEST_CASE("handlers: inflate decompresses every member of concatenated gzip") {
  const HandlerResult r = run("inflate", {}, deflate_text("first\n", 31) + deflate_text("second\n", 31));
  REQUIRE_MESSAGE(r.status == HandlerStatus::kOk, r.message);
  CHECK(r.output == "first\nsecond\n");
}

TEST_CASE("handlers: inflate output larger than the growth step") {
  const std::string big(1 << 20, 'z');  // several doublings of the output buffer
  const HandlerResult r = run("inflate", {}, deflate_text(big, 31), 2 << 20);
  REQUIRE_MESSAGE(r.status == HandlerStatus::kOk, r.message);
  CHECK(r.output == big);
}

TEST_CASE("handlers: inflate rejects corrupt and truncated streams") {
  SUBCASE("corrupt: zlib's own message and where") {
    // A final stored block whose length and its complement disagree.
    const HandlerResult r = run("inflate", {{"format", "raw"}}, std::string("\x01\x05\x00\x00\x00hello", 10));
    CHECK(r.status == HandlerStatus::kError);
    CHECK(r.message.find("invalid stored block lengths") != std::string::npos);
    CHECK(r.message.find("at byte") != std::string::npos);
  }
  SUBCASE("not compressed at all") {
    const HandlerResult r = run("inflate", {}, "plain text, no header");
    CHECK(r.status == HandlerStatus::kError);
    CHECK(r.message.find("incorrect header check") != std::string::npos);
  }
  SUBCASE("truncated") {
    const std::string gz = deflate_text(kText, 31);
    const HandlerResult r = run("inflate", {}, gz.substr(0, gz.size() / 2));
    CHECK(r.status == HandlerStatus::kError);
    CHECK(r.message == "truncated compressed stream");
    CHECK(run("inflate", {}, "").message == "truncated compressed stream");
  }
}

TEST_CASE("handlers: inflate output over the cap") {
  CHECK(run("inflate", {}, deflate_text(kText, 31), kText.size() - 1).status == HandlerStatus::kOutputLimit);
  CHECK(run("inflate", {}, deflate_text(kText, 31), kText.size()).status == HandlerStatus::kOk);
}

TEST_CASE("handlers: inflate argument errors") {
  CHECK(make_error("inflate", {{"level", "9"}}) == "handler 'inflate' does not take --arg 'level' (it takes: format)");
  CHECK(make_error("inflate", {{"format", "bzip2"}}).find("auto, gzip, zlib or raw") != std::string::npos);
}

TEST_CASE("handlers: the wordcount example plugin") {
  const std::string plugin = std::string("plugin:") + PILLBOX_BUILD_DIR + "/libpillbox-plugin-wordcount.so";

  CHECK(run(plugin, {}, "hello pb\n").output == "1 2 9\n");
  CHECK(run(plugin, {}, "").output == "0 0 0\n");
  CHECK(run(plugin, {}, std::string(" one\0word ", 10)).output == "0 1 10\n");  // NUL is just a byte
  CHECK(run(plugin, {{"unit", "words"}}, "one two three\nfour").output == "4\n");

  const HandlerResult capped = run(plugin, {}, "hello pb\n", 3);
  CHECK(capped.status == HandlerStatus::kOutputLimit);

  CHECK(make_error(plugin, {{"foo", "1"}}) ==
        "plugin wordcount init failed: unknown --arg 'foo' (wordcount takes: unit=lines|words|bytes)");
}

TEST_CASE("handlers: a plugin that cannot be loaded says why") {
  const std::string missing = make_error("plugin:/nonexistent/libnope.so", {});
  CHECK(missing == "cannot load plugin /nonexistent/libnope.so: No such file or directory");

  // A file that exists but is not a shared object: dlopen's own reason.
  const std::string not_elf = make_error(std::string("plugin:") + PILLBOX_SOURCE_DIR + "/CMakeLists.txt", {});
  CHECK(not_elf.find("cannot load plugin ") == 0);
}
