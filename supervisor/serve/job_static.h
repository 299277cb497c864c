#pragma once
// The style and script of the job forms and pages (job_pages.h), served
// after console_static.h's as /static/console.css and /static/console.js: no
// inline style or script (the console's Content-Security-Policy forbids them).
#include <string_view>

namespace pillbox::serve {

extern const std::string_view kJobsCss;
extern const std::string_view kJobsJs;

}  // namespace pillbox::serve
