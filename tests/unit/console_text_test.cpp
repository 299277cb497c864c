// The console's defences that need no server: HTML escaping of hostile
// text, the payload preview (text or hex, bounded, never markup), the access
// token's check, and the parsing of --listen, ids and filters.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <string>

#include "supervisor/serve/access_token.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/serve/console_server.h"
#include "supervisor/serve/html_text.h"
#include "tests/unit/scratch_dir.h"

using namespace pillbox;
using namespace pillbox::serve;

TEST_CASE("console html_escape: markup, quotes, invalid UTF-8 and control bytes never reach the page raw") {
  CHECK(html_escape("<script>alert('x')</script>") == "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;");
  CHECK(html_escape("a\"b&c") == "a&quot;b&amp;c");
  CHECK(html_escape("caf\xC3\xA9") == "caf\xC3\xA9");                         // valid UTF-8 kept
  CHECK(html_escape("\xFF<") == "\xEF\xBF\xBD&lt;");                          // an invalid byte is U+FFFD
  CHECK(html_escape("\xC0\xBC") == "\xEF\xBF\xBD\xEF\xBF\xBD");               // overlong '<' is not '<'
  CHECK(html_escape("\xED\xA0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // a surrogate
  CHECK(html_escape("a\x1b[31mb") == "a\xEF\xBF\xBD[31mb");                   // ESC
  CHECK(html_escape("\xC2\x9B") == "\xEF\xBF\xBD");                           // C1 CSI
  CHECK(html_escape("line\n\ttab") == "line\n\ttab");
  CHECK(html_escape(std::string("a\0b", 3)) == "a\xEF\xBF\xBD" "b");
}

TEST_CASE("console html_escape: bidirectional controls cannot reorder what a page shows") {
  // "invoice<RLO>fdp.exe" would read "invoiceexe.pdf".
  CHECK(html_escape("invoice\xE2\x80\xAE" "fdp.exe") == "invoice\xEF\xBF\xBD" "fdp.exe");
  for (const char* control : {"\xD8\x9C", "\xE2\x80\x8E", "\xE2\x80\x8F", "\xE2\x80\xAA", "\xE2\x80\xAE",
                              "\xE2\x81\xA6", "\xE2\x81\xA9"}) {
    CAPTURE(control);
    CHECK(html_escape(control) == "\xEF\xBF\xBD");
    CHECK_FALSE(is_printable_utf8(std::string("text ") + control));
  }
  // Their neighbours are ordinary characters.
  for (const char* ordinary : {"\xE2\x80\x8D", "\xE2\x80\xAF", "\xE2\x81\xA5", "\xE2\x81\xAA", "\xD8\x9B"}) {
    CAPTURE(ordinary);
    CHECK(html_escape(ordinary) == ordinary);
  }
  // A payload with one is previewed as hex, never as reordered text.
  CHECK(payload_preview_html("a\xE2\x80\xAE" "b", 4096).find("e2 80 ae") != std::string::npos);
}

TEST_CASE("console url_encode: only unreserved bytes stay as they are") {
  CHECK(url_encode("pb1-0abc_~.") == "pb1-0abc_~.");
  CHECK(url_encode("a b&c=d\"<") == "a%20b%26c%3Dd%22%3C");
  CHECK(url_encode("\xFF") == "%FF");
}

TEST_CASE("console payload preview: printable UTF-8 as escaped text, anything else as hex, bounded") {
  const std::string text = payload_preview_html("hello <b>world</b>\n", 4096);
  CHECK(text.find("payload text") != std::string::npos);
  CHECK(text.find("hello &lt;b&gt;world&lt;/b&gt;") != std::string::npos);
  CHECK(text.find("<b>") == std::string::npos);

  const std::string binary = payload_preview_html(std::string("<script>\xFF\x00", 10), 4096);
  CHECK(binary.find("payload hex") != std::string::npos);
  CHECK(binary.find("3c 73 63 72") != std::string::npos);  // "<scr" as hex
  CHECK(binary.find("&lt;script&gt;..") != std::string::npos);
  CHECK(binary.find("<script") == std::string::npos);

  const std::string big(1 << 20, 'a');
  const std::string cut = payload_preview_html(big, 4096);
  CHECK(cut.size() < 4096 + 512);
  CHECK(cut.find("first 4096 of 1048576 bytes shown (text)") != std::string::npos);
  // A cut inside a UTF-8 sequence steps back to its start: still text.
  const std::string accents = std::string(4095, 'a') + "\xC3\xA9" + "tail";
  CHECK(payload_preview_html(accents, 4096).find("payload text") != std::string::npos);
  CHECK(is_printable_utf8("tab\tnewline\n\r"));
  CHECK_FALSE(is_printable_utf8("bell\a"));
}

TEST_CASE("console token: 64 hex digits in STORE/serve.token (0600), new on each write; checked as a bearer") {
  pillbox::test::ScratchDir scratch("console-token");
  auto first = write_new_token_file(token_path(scratch.path));
  REQUIRE_MESSAGE(first.has_value(), first.error());
  CHECK(first->size() == 64);
  struct stat st {};
  REQUIRE(::stat(token_path(scratch.path).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  auto second = write_new_token_file(token_path(scratch.path));
  REQUIRE(second.has_value());
  CHECK(*second != *first);

  CHECK(check_authorization("", *second) == TokenCheck::kMissing);
  CHECK(check_authorization("Basic " + *second, *second) == TokenCheck::kMissing);
  CHECK(check_authorization("Bearer ", *second) == TokenCheck::kMissing);
  CHECK(check_authorization("Bearer " + *first, *second) == TokenCheck::kWrong);
  CHECK(check_authorization("Bearer " + second->substr(1), *second) == TokenCheck::kWrong);
  CHECK(check_authorization("Bearer " + *second, *second) == TokenCheck::kGood);
}

TEST_CASE("console --listen, record ids and filters: what is accepted and what the errors say") {
  auto a = parse_listen_address("127.0.0.1:0");
  REQUIRE(a.has_value());
  CHECK(a->host == "127.0.0.1");
  CHECK(a->port == 0);
  auto v6 = parse_listen_address("[::1]:8080");
  REQUIRE(v6.has_value());
  CHECK(v6->host == "::1");
  for (const char* bad : {"localhost", ":80", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:8o", "::1:80"}) {
    INFO(bad);
    CHECK_FALSE(parse_listen_address(bad).has_value());
  }
  CHECK(is_loopback_host("127.0.0.1"));
  CHECK_FALSE(is_loopback_host("0.0.0.0"));

  CHECK(record_id("42").has_value());
  for (const char* bad : {"0", "-1", "+1", " 1", "1x", "", "99999999999999999999"}) {
    INFO(bad);
    CHECK_FALSE(record_id(bad).has_value());
  }
  auto f = records_filter({{"status", "discarded"}, {"kind", "crash"}, {"limit", "5"}, {"fingerprint", ""}}, true);
  REQUIRE_MESSAGE(f.has_value(), f.error());
  CHECK(f->limit == 5);
  CHECK_FALSE(f->fingerprint.has_value());  // empty: any
  CHECK(records_filter({}, true)->limit == kMaxPage);
  CHECK(records_filter({{"limit", "1"}}, false).error().find("unknown parameter 'limit'") != std::string::npos);
  CHECK(records_filter({{"kind", "nope"}}, true).error_code() == ErrorCode::kUsage);
  CHECK(tasks_filter({{"state", "held"}}).has_value());
  CHECK_FALSE(tasks_filter({{"status", "held"}}).has_value());
}
