#pragma once
// The console's job routes (console_jobs.h; bodies in docs/console.md, The
// JSON API): a request's body, checked, as the arguments of the CLI verb
// the job runs, then started on the board.
// A start is 202 {"job": JOB}; a bad body 400 saying what is allowed (an
// empty body: the defaults); a bad record id 404; too many jobs 429; a
// reproduce or minimize of a record that one runs on 409. The record itself
// is looked up by the verb: no such record is a failed job with its message.
#include <functional>
#include <string>

#include "shared/status.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/serve/console_jobs.h"

namespace pillbox::serve {

inline constexpr int kMaxWebReproduceRuns = 100;
inline constexpr int kMaxWebMinimizeRuns = 100000;
inline constexpr int kMaxWebMinimizeSeconds = 3600;
inline constexpr std::size_t kMaxWebReplayIds = 1000;

// A record id as the request gave it, checked by the quarantine the
// console shows (ConsoleSource::checked_id): the text the CLI takes, or a
// kUsage error saying what an id is there.
using IdCheck = std::function<Expected<std::string>(const std::string&)>;

// The verb's arguments for record `id` (checked) and `body` (kUsage errors
// say what is allowed); `actor` and the records go into the request.
Expected<JobRequest> reproduce_request(const std::string& id, const std::string& body, const std::string& actor);
Expected<JobRequest> minimize_request(const std::string& id, const std::string& body, const std::string& actor);
// "ids" may be numbers or text, each checked by `check_id`.
Expected<JobRequest> replay_request(const std::string& body, const std::string& actor, const IdCheck& check_id);

// The routes: the id, then the body, then the board.
ApiReply start_reproduce(JobBoard& board, const IdCheck& check_id, const std::string& id_text, const std::string& body,
                         const std::string& actor);
ApiReply start_minimize(JobBoard& board, const IdCheck& check_id, const std::string& id_text, const std::string& body,
                        const std::string& actor);
ApiReply start_replay(JobBoard& board, const IdCheck& check_id, const std::string& body, const std::string& actor);

}  // namespace pillbox::serve
