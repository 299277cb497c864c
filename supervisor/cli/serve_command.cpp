// pillbox serve: the web console over a store (supervisor/serve/). Parses,
// opens the store, binds, writes the access token, prints the URL, serves
// until SIGINT or SIGTERM.
#include <cstdio>
#include <string>

#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/serve/access_token.h"
#include "supervisor/serve/console_server.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox serve [--store DIR] [--listen HOST:PORT]\n"
    "\n"
    "A web console over the store: the quarantine (filters, paging), the fingerprint groups,\n"
    "each record (crash state, attempts, audit trail, stderr, a payload preview that is never\n"
    "markup, the payload's download), the tasks, and a JSON API under /api/ with the objects of\n"
    "the CLI's --json (GET /api/records, /api/records/ID, /api/records/ID/payload, /api/stats,\n"
    "/api/tasks; POST /api/records/ID/discard {\"reason\": TEXT}). See docs/console.md.\n"
    "\n"
    "Prints its URL as the first line on stdout. Each start writes a new random access token to\n"
    "DIR/serve.token (mode 0600): every action (a POST) needs `Authorization: Bearer TOKEN` and is\n"
    "audited as \"web: ADDRESS\". Reads need no token: keep the console on loopback. SIGINT or\n"
    "SIGTERM stops it.\n"
    "\n"
    "Reproduce, minimize and replay (POST /api/records/ID/reproduce, .../minimize, /api/replay) run\n"
    "as jobs: this pillbox binary as a child process, at most 2 at once, shown at /jobs. Stopping\n"
    "serve stops them (SIGTERM, then waits up to 60 s); jobs are kept in memory only.\n"
    "\n"
    "options:\n"
    "  --store DIR         the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                      ~/.local/state/pillbox); it must exist\n"
    "  --listen HOST:PORT  where to listen (default 127.0.0.1:8080; port 0: a free port)\n"
    "\n"
    "exit codes: 0 stopped by SIGINT or SIGTERM, 2 usage error or no usable --store, 3 the store\n"
    "cannot be opened, the address cannot be listened on (in use), or the token cannot be written\n";

int serve_error(const std::string& message, int exit_code) {
  std::fprintf(stderr, "pillbox serve: %s\n", message.c_str());
  return exit_code;
}

}  // namespace

int serve_command(int argc, char** argv) {
  auto args = Args::parse(argc, argv, 2, {{"store"}, {"listen"}, {"help", false}}, "serve");
  if (!args) return serve_error(args.error(), kExitUsage);
  if (args->flag("help")) {
    std::fputs(kHelp, stdout);
    return kExitOk;
  }
  if (!args->positional().empty()) return serve_error("unexpected argument '" + args->positional()[0] + "'", kExitUsage);
  if (args->has_dashdash()) return serve_error("unexpected '--'", kExitUsage);
  auto address = serve::parse_listen_address(args->value("listen").value_or("127.0.0.1:8080"));
  if (!address) return serve_error(address.error(), kExitUsage);

  StoreAccessError error;
  auto access = open_existing_store(args->value("store").value_or(""), error);
  if (!access) return serve_error(error.message, error.exit_code);
  serve::ConsoleServer server(serve::ConsoleStore{access->store.db(), *access->quarantine, access->store.dir()});
  // Bound before the token is written: a serve that cannot listen leaves
  // the running one's token (and everything else in the store) as it was.
  if (auto port = server.bind(*address); !port) return serve_error(port.error(), exit_code_for(port.error_code()));
  auto token = serve::write_new_token(access->store.dir());
  if (!token) return serve_error(token.error(), kExitSetup);

  std::printf("%s\n", server.url().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "pillbox serve: %s on %s; actions need the token in %s; Ctrl-C stops\n",
               server.url().c_str(), access->store.dir().c_str(), serve::token_path(access->store.dir()).c_str());
  if (!serve::is_loopback_host(address->host)) {
    std::fprintf(stderr, "pillbox serve: warning: %s is not a loopback address: whoever reaches it can read the "
                         "quarantine's payloads\n", address->host.c_str());
  }
  auto stopped = server.run_until_signal(std::move(*token));
  if (!stopped) return serve_error(stopped.error(), kExitSetup);
  std::fprintf(stderr, "pillbox serve: stopped (%s)\n", stop_signal_name(*stopped));
  return kExitOk;
}

}  // namespace pillbox::cli
