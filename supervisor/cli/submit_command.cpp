// pillbox submit --redis URL --stream NAME INPUT...: the tasks of the inputs,
// read exactly as `run` reads them, added to a Redis stream for the fleet's
// workers. Thin over supervisor/broker/task_submit.h.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "supervisor/broker/redis_connection.h"
#include "supervisor/broker/stream_publisher.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/child_options.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/path_options.h"
#include "supervisor/flow/input_source.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox submit --redis redis://HOST[:PORT][/DB] --stream NAME INPUT...\n"
    "\n"
    "Adds one entry per task to the Redis stream NAME, with the fields `key` and `payload`\n"
    "(the payload's exact bytes). INPUT is a file, a directory (every regular file below it,\n"
    "in order) or - for JSON lines on stdin ({\"key\": ..., \"payload\": ...} or \"payload_b64\"),\n"
    "exactly as `pillbox run` reads them.\n"
    "\n"
    "options:\n"
    "  --redis URL         the server (redis://HOST[:PORT][/DB]; port 6379 and database 0 by default)\n"
    "  --stream NAME       the stream the workers read\n"
    "  --max-payload SIZE  larger payloads are not added (an input error; default 512M, Redis's limit)\n"
    "  --follow-symlinks   in directories, read what symlinks point to (regular files only; anywhere)\n"
    "  --quiet             no summary on stderr\n"
    "\n"
    "exit codes: 0 all added, 1 some inputs could not be read (the rest were added), 2 usage\n"
    "error, 3 Redis cannot be reached or refused an entry (the summary says how many went in)\n";

int fail(const std::string& message, int code) { return command_error("submit", message, code); }

}  // namespace

int submit_command(int argc, char** argv) {
  const std::vector<OptionSpec> options = {{"redis"}, {"stream"}, {"max-payload"}, {"follow-symlinks", false},
                                           {"quiet", false}, {"help", false}};
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "submit", kHelp, exit_code);
  if (!args) return exit_code;
  auto fleet = read_fleet_target(*args, "--stream NAME is required",
                                 args->positional().empty()
                                     ? Status::error("no inputs: name files, directories or - (JSON lines on stdin)")
                                     : Status::ok());
  if (!fleet) return fail(fleet.error(), exit_code_for(fleet.error_code()));
  auto max_payload = read_size(*args, "max-payload");
  if (!max_payload) return fail(max_payload.error(), kExitUsage);
  auto source = open_inputs(args->positional(), STDIN_FILENO, read_symlinks_in_tree(*args));
  if (!source) return fail(source.error(), kExitUsage);
  auto redis = broker::RedisConnection::open(fleet->address);
  if (!redis) return fail(redis.error(), exit_code_for(redis.error_code()));

  broker::StreamPublisher publisher(*redis, fleet->stream);
  auto report = broker::submit_tasks(publisher, **source, [](const std::string& error) {
    std::fprintf(stderr, "pillbox submit: %s\n", table_cell(error, 2000).c_str());
  }, static_cast<std::size_t>(max_payload->value_or(broker::kDefaultMaxStreamPayload)));
  if (!report) return fail(report.error(), kExitSetup);
  if (!args->flag("quiet")) {
    std::fprintf(stderr, "pillbox submit: %zu task%s added to %s on %s%s%s\n", report->submitted,
                 report->submitted == 1 ? "" : "s", table_cell(fleet->stream, 200).c_str(),
                 fleet->address.describe().c_str(),
                 report->submitted > 0 ? (" (entries " + report->first_id + " to " + report->last_id + ")").c_str() : "",
                 report->input_errors > 0
                     ? ("; " + std::to_string(report->input_errors) + " inputs could not be read").c_str()
                     : "");
  }
  return report->input_errors > 0 ? kExitFailures : kExitOk;
}

}  // namespace pillbox::cli
