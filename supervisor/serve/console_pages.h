#pragma once
// The console's HTML pages (docs/console.md, Pages), rendered on the server
// from the JSON objects the API returns, so a page shows what the API and
// the CLI say. Every value from the store is escaped (html_text.h); a
// payload is previewed as text or hex, never as markup. The pages load only
// /static/console.css and /static/console.js (console_static.h): they work
// offline, under Content-Security-Policy default-src 'self'.
#include <string>

#include "supervisor/serve/console_source.h"

namespace pillbox::serve {

struct Page {
  int status = 200;
  std::string html;
};

// Records shown on one page of the list when the query gives no limit.
inline constexpr std::int64_t kListPageSize = 50;
// The most payload bytes a record page previews.
inline constexpr std::size_t kPreviewBytes = 4096;

Page list_page(ConsoleSource& source, const Query& query);
Page groups_page(ConsoleSource& source, const Query& query);
Page record_page(ConsoleSource& source, const std::string& id_text);
Page tasks_page(ConsoleSource& source, const Query& query);
Page runs_page(ConsoleSource& source);
// A page for an error: `status` and `message` (escaped here).
Page error_page(int status, const std::string& message);

// For the pages of other files (job_pages.cpp) too: the frame every page
// has (nav `active` is the href of its entry); a JSON value as text
// (strings as they are, null as "-", anything else as JSON), and escaped;
// field `name` of `object` escaped, "-" when it has none.
std::string page_layout(const std::string& title, const std::string& active, const std::string& body,
                        const std::string& where = "");
std::string value_text(const nlohmann::json& v);
std::string value_html(const nlohmann::json& v);
std::string field_html(const nlohmann::json& object, const char* name);

}  // namespace pillbox::serve
