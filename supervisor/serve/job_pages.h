#pragma once
// The console's pages of jobs (/jobs, /jobs/N; docs/console.md, Jobs),
// rendered from the API's JSON like console_pages.h's, every value escaped,
// and the forms that start jobs. The forms post with the access token
// (console.js), then go to /jobs/N.
#include <string>

#include "supervisor/serve/console_jobs.h"
#include "supervisor/serve/console_pages.h"

namespace pillbox::serve {

Page jobs_page(const JobBoard& board);
Page job_page(const JobBoard& board, const std::string& id_text);

// The record page's Actions: reproduce (runs), minimize, replay this
// record (only for a record open and not being replayed: quarantined,
// allowed or failed-again).
std::string record_actions_html(const std::string& id, const std::string& status);
// The quarantine list's "replay the records of this filter" form, when the
// filter has a fingerprint or a kind (what a replay selects by); "" otherwise.
std::string replay_filter_form_html(const std::string& fingerprint, const std::string& kind,
                                    const std::string& raise_site);

}  // namespace pillbox::serve
