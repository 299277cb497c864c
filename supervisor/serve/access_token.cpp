#include "supervisor/serve/access_token.h"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include "supervisor/io/private_file.h"

namespace pillbox::serve {

std::string token_path(const std::string& store_dir) { return store_dir + "/serve.token"; }

Expected<std::string> write_new_token_file(const std::string& file) {
  unsigned char random[32];
  if (RAND_bytes(random, sizeof random) != 1) return Error{"cannot draw a random access token (OpenSSL RAND_bytes)"};
  static const char* kHex = "0123456789abcdef";
  std::string token;
  for (unsigned char c : random) {
    token += kHex[c >> 4];
    token += kHex[c & 15];
  }
  if (auto s = write_file_whole(file, file + ".tmp", token + "\n"); !s) {
    return Error{s.message()};
  }
  return token;
}

TokenCheck check_authorization(std::string_view header, std::string_view token) {
  constexpr std::string_view kScheme = "Bearer ";
  if (header.size() < kScheme.size() || header.substr(0, kScheme.size()) != kScheme) return TokenCheck::kMissing;
  std::string_view given = header.substr(kScheme.size());
  while (!given.empty() && given.front() == ' ') given.remove_prefix(1);
  while (!given.empty() && given.back() == ' ') given.remove_suffix(1);
  if (given.empty()) return TokenCheck::kMissing;
  // The length is no secret (always 64): only equal lengths are compared.
  if (given.size() != token.size() || token.empty()) return TokenCheck::kWrong;
  return CRYPTO_memcmp(given.data(), token.data(), token.size()) == 0 ? TokenCheck::kGood : TokenCheck::kWrong;
}

}  // namespace pillbox::serve
