#pragma once
// The console's stylesheet and script, compiled in: served as
// /static/console.css and /static/console.js, so the pages need no CDN, no
// build step and no file next to the binary, and run under
// Content-Security-Policy default-src 'self' (no inline script or style).
#include <string_view>

namespace pillbox::serve {

extern const std::string_view kConsoleCss;
// The pages' forms post with the access token (asked for once, kept in
// sessionStorage) and show answers as text, never markup.
extern const std::string_view kConsoleJs;

}  // namespace pillbox::serve
