#include "shared/base64.h"

#include <doctest/doctest.h>

#include <random>
#include <string>

namespace pillbox {
namespace {

using namespace std::string_literals;

TEST_CASE("base64: RFC 4648 test vectors") {
  const std::pair<std::string, std::string> vectors[] = {
      {"", ""},         {"f", "Zg=="},         {"fo", "Zm8="},         {"foo", "Zm9v"},
      {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="}, {"foobar", "Zm9vYmFy"},
  };
  for (const auto& vector : vectors) {
    const std::string& plain = vector.first;  // clang 14 cannot capture a structured binding
    const std::string& encoded = vector.second;
    CAPTURE(plain);
    CHECK(base64_encode(plain) == encoded);
    const auto decoded = base64_decode(encoded);
    REQUIRE(decoded.has_value());
    CHECK(*decoded == plain);
  }
}

TEST_CASE("base64: the alphabet's last characters and binary bytes") {
  CHECK(base64_encode("\xfb\xff"s) == "+/8=");
  CHECK(base64_encode("\0\0\0"s) == "AAAA");
  CHECK(base64_encode("\xff\xff\xff"s) == "////");
  CHECK(base64_decode("+/8=") == std::optional<std::string>("\xfb\xff"s));
  CHECK(base64_decode("AAAA") == std::optional<std::string>("\0\0\0"s));
}

TEST_CASE("base64: all 256 byte values round-trip") {
  std::string all;
  for (int i = 0; i < 256; ++i) all += static_cast<char>(i);
  const std::string enc = base64_encode(all);
  CHECK(enc.size() == (256 + 2) / 3 * 4);
  const auto dec = base64_decode(enc);
  REQUIRE(dec.has_value());
  CHECK(*dec == all);
  // Every single byte on its own too.
  for (int i = 0; i < 256; ++i) {
    const std::string one(1, static_cast<char>(i));
    const auto back = base64_decode(base64_encode(one));
    REQUIRE(back.has_value());
    CHECK(*back == one);
  }
}

TEST_CASE("base64: random buffers round-trip") {
  std::mt19937 rng(42);
  for (int iter = 0; iter < 500; ++iter) {
    std::string data(rng() % 300, '\0');
    for (auto& c : data) c = static_cast<char>(rng());
    const std::string enc = base64_encode(data);
    CHECK(enc.size() % 4 == 0);
    CHECK(enc.size() == (data.size() + 2) / 3 * 4);
    const auto dec = base64_decode(enc);
    REQUIRE(dec.has_value());
    REQUIRE(*dec == data);
  }
}

TEST_CASE("base64: invalid inputs") {
  const std::string bad[] = {
      "Zm9v!",     // bad char (and bad length)
      "Zm9!",      // bad char
      "Zm 9",      // whitespace is not allowed
      "Zm9v\n",    // trailing newline
      "Zm9",       // bad length
      "Z",         // bad length
      "Zm9vY",     // bad length
      "Zg=",       // bad length
      "Zg==Zm9v",  // data after padding ("=" in the middle)
      "Zm=v",      // data after padding inside the last group
      "Z===",      // too much padding
      "====",      // padding only
      "=Zm9",      // padding first
      "Zm9v====",  // a whole group of padding
      "Zm9-",      // URL-safe alphabet is not accepted
      "Zm9_",
      "Zg\0="s,    // NUL byte
      "Zm9v\xc3\xa9=="s,  // non-ASCII
  };
  for (const std::string& text : bad) {
    CAPTURE(text);
    CHECK_FALSE(base64_decode(text).has_value());
  }
  CHECK(base64_decode("").has_value());
}

TEST_CASE("is_valid_utf8: valid text") {
  CHECK(is_valid_utf8(""));
  CHECK(is_valid_utf8("plain ascii\n\t"));
  CHECK(is_valid_utf8("\0"s));
  CHECK(is_valid_utf8("caf\xc3\xa9"));                 // é, 2 bytes
  CHECK(is_valid_utf8("\xe2\x82\xac"));                // €, 3 bytes
  CHECK(is_valid_utf8("\xf0\x9f\x98\x80"));            // 😀, 4 bytes
  CHECK(is_valid_utf8("\xc2\x80"));                    // U+0080, smallest 2-byte
  CHECK(is_valid_utf8("\xe0\xa0\x80"));                // U+0800, smallest 3-byte
  CHECK(is_valid_utf8("\xf0\x90\x80\x80"));            // U+10000, smallest 4-byte
  CHECK(is_valid_utf8("\xed\x9f\xbf"));                // U+D7FF, just below the surrogates
  CHECK(is_valid_utf8("\xee\x80\x80"));                // U+E000, just above
  CHECK(is_valid_utf8("\xef\xbf\xbf"));                // U+FFFF
  CHECK(is_valid_utf8("\xf4\x8f\xbf\xbf"));            // U+10FFFF, the last code point
  CHECK(is_valid_utf8("\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xe4\xb8\x96\xe7\x95\x8c"));
}

TEST_CASE("is_valid_utf8: invalid sequences") {
  const std::string bad[] = {
      "\xc0\x80",              // overlong NUL
      "\xc1\xbf",              // overlong
      "\xe0\x80\x80",          // overlong 3-byte
      "\xe0\x9f\xbf",          // overlong 3-byte (U+07FF)
      "\xf0\x80\x80\x80",      // overlong 4-byte
      "\xf0\x8f\xbf\xbf",      // overlong 4-byte (U+FFFF)
      "\xed\xa0\x80",          // U+D800, high surrogate
      "\xed\xbf\xbf",          // U+DFFF, low surrogate
      "\xf4\x90\x80\x80",      // U+110000
      "\xf7\xbf\xbf\xbf",      // U+1FFFFF
      "\xf8\x88\x80\x80\x80",  // 5-byte form
      "\xfc\x84\x80\x80\x80\x80",
      "\xfe",
      "\xff",
      "\xc3",                  // truncated 2-byte
      "\xe2\x82",              // truncated 3-byte
      "\xf0\x9f\x98",          // truncated 4-byte
      "abc\xe2\x82",           // truncated at the end of text
      "\x80",                  // lone continuation byte
      "a\xbf" "b",
      "\xc3\xa9\xa9",          // continuation after a complete sequence
      "\xc3" "a",              // lead byte followed by ASCII
      "\xe2\x28\xa1",          // bad second byte
      "\xf0\x9f\x98" "a",      // bad fourth byte
  };
  for (const std::string& s : bad) {
    CAPTURE(s);
    CHECK_FALSE(is_valid_utf8(s));
  }
}

}  // namespace
}  // namespace pillbox
