#pragma once
// The console's access token, which every POST needs as `Authorization:
// Bearer TOKEN`. A new one on each start of `pillbox serve`: whoever can
// read its file may act, and an earlier start's token stops working.
#include <string>
#include <string_view>

#include "shared/status.h"

namespace pillbox::serve {

// STORE/serve.token.
std::string token_path(const std::string& store_dir);

// 32 random bytes as 64 hex digits, written whole to `file` (mode 0600,
// never through a symlink, replacing the last one); its directory must exist.
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
