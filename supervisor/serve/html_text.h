#pragma once
// Text from the store made safe inside an HTML page. Everything a console
// page shows came from a payload, a child or an operator, and may be
// hostile: markup, quotes that end an attribute, bytes that are not UTF-8.
#include <cstddef>
#include <string>
#include <string_view>

namespace pillbox::serve {

// `text` escaped for an element's content and for a quoted attribute value
// (& < > " ' all escaped). Bytes that are not valid UTF-8, control
// characters other than tab and newline, and bidirectional controls (which
// would reorder what the page shows) become U+FFFD: what the browser
// decodes is what was checked.
std::string html_escape(std::string_view text);

// `text` as one component of a URL's query (RFC 3986 unreserved bytes kept,
// every other byte %XX). The result still goes through html_escape in an href.
std::string url_encode(std::string_view text);

// True when `bytes` is valid UTF-8 without control characters other than
// tab, newline and carriage return, and without bidirectional controls: a
// payload shown as text as it is.
bool is_printable_utf8(std::string_view bytes);

// The first `max_bytes` of a payload as an HTML <pre> block that is never
// markup: printable UTF-8 as escaped text, anything else as a hex dump with
// offsets and ASCII columns. A note says how many bytes were left out of
// `total_bytes` (the payload's size; `bytes` may be only its head; 0: the
// size of `bytes`).
std::string payload_preview_html(std::string_view bytes, std::size_t max_bytes, std::size_t total_bytes = 0);

}  // namespace pillbox::serve
