#pragma once
// The console's access token: every action (a POST) needs it as
// `Authorization: Bearer TOKEN`. A new one on each start of `pillbox
// serve`, written to STORE/serve.token (0600), or the file --token-file
// names: whoever can read it may act, nobody else, and a token from an
// earlier start stops working.
#include <string>
#include <string_view>

#include "shared/status.h"

namespace pillbox::serve {

// STORE/serve.token.
std::string token_path(const std::string& store_dir);

// 32 random bytes (OpenSSL RAND_bytes) as 64 hex digits, written whole to
// `file` (mode 0600, never through a symlink, replacing the last one; its
// directory exists): token_path, or serve's --token-file.
Expected<std::string> write_new_token_file(const std::string& file);

// How an Authorization header compares with the token.
enum class TokenCheck {
  kMissing,  // no header, or not "Bearer ..."  (HTTP 401)
  kWrong,    // a bearer token, not this one    (HTTP 403)
  kGood,
};
// Compared in constant time (CRYPTO_memcmp): the answer's timing says
// nothing about how much of a guess was right.
TokenCheck check_authorization(std::string_view header, std::string_view token);

}  // namespace pillbox::serve
