// pillbox serve: the web console over a store, or over the fleet's
// quarantine on Redis or RabbitMQ (supervisor/serve/). Parses, opens the quarantine,
// binds, writes the access token, prints the URL, serves until SIGINT or
// SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "shared/sha256.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/exec/stop_signals.h"
#include "supervisor/serve/access_token.h"
#include "supervisor/serve/amqp_console_source.h"
#include "supervisor/serve/kafka_console_source.h"
#include "supervisor/serve/console_server.h"
#include "supervisor/serve/redis_console_source.h"
#include "supervisor/serve/serve_lock.h"
#include "supervisor/serve/store_console_source.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/store/store_dir.h"

namespace pillbox::cli {
namespace {

const char* kHelp =
    "usage: pillbox serve [--store DIR | --redis URL --stream NAME | --amqp URL --queue NAME |\n"
    "                      --kafka BROKERS --topic T] [--listen HOST:PORT] [--token-file FILE]\n"
    "\n"
    "A web console over the store: the quarantine (filters, paging), the fingerprint groups,\n"
    "each record (crash state, attempts, audit trail, stderr, a payload preview that is never\n"
    "markup, the payload's download, the bundle of export --bundle as record-ID.tar.gz), the\n"
    "tasks, and a JSON API under /api/ with the objects of the CLI's --json (GET /api/records,\n"
    "/api/records/ID, /api/records/ID/payload, /api/records/ID/bundle, /api/stats, /api/tasks;\n"
    "POST /api/records/ID/discard {\"reason\": TEXT}). See docs/console.md.\n"
    "With --redis URL --stream NAME, the same pages and API over the fleet's quarantine (the\n"
    "workers' dead letters, NAME:dlq), as `quarantine list/show/stats --redis` print it: ids are\n"
    "entry ids, there are no tasks or runs, a patch is of the payload only (a revision kept\n"
    "beside the dead letter), and while Redis cannot be reached the console answers 503 and\n"
    "goes on.\n"
    "With --amqp URL --queue NAME, the same over the fleet's quarantine on RabbitMQ (the stream\n"
    "NAME.dlq), as `quarantine list/show/stats --amqp` print it: ids are offsets, there are no\n"
    "tasks, runs or replay outputs (results go to the workers' reply_to or NAME.results), a\n"
    "patch is of the payload only, and 503 while RabbitMQ cannot be reached.\n"
    "The URL's password is never shown: pages, replies and the jobs' command lines name the\n"
    "broker as amqp://USER@HOST:PORT/VHOST, and the jobs get the password in\n"
    "$PILLBOX_AMQP_PASSWORD. Give it so to serve too (a URL without a password takes it from\n"
    "there), so that it is not on serve's command line either.\n"
    "With --kafka BROKERS --topic T, the same over the fleet's quarantine on Kafka (the topic\n"
    "T.dlq), as `quarantine list/show/stats --kafka` print it: ids are PARTITION@OFFSET, there are\n"
    "no tasks, runs or replay outputs, a patch is of the payload only, and 503 while the cluster\n"
    "cannot be reached.\n"
    "\n"
    "Prints its URL as the first line on stdout. Each start writes a new random access token to\n"
    "DIR/serve.token, or FILE (mode 0600): every action (a POST) needs `Authorization: Bearer\n"
    "TOKEN` and is audited as \"web: ADDRESS\". Reads need no token: keep the console on loopback.\n"
    "One serve per token file: it holds a lock beside it (DIR/serve.lock, with its pid and URL),\n"
    "and a second one exits 3.\n"
    "SIGINT or SIGTERM stops it.\n"
    "\n"
    "Reproduce, minimize and replay (POST /api/records/ID/reproduce, .../minimize, /api/replay) run\n"
    "as jobs: this pillbox binary as a child process, at most 2 at once, shown at /jobs. Stopping\n"
    "serve stops them (SIGTERM, then waits up to 60 s); jobs are kept in memory only.\n"
    "\n"
    "options:\n"
    "  --store DIR         the store (default: $PILLBOX_STORE, else $XDG_STATE_HOME/pillbox, else\n"
    "                      ~/.local/state/pillbox); it must exist\n"
    "  --redis URL --stream NAME\n"
    "                      the fleet's quarantine instead of a store (redis://HOST[:PORT][/DB])\n"
    "  --amqp URL --queue NAME\n"
    "                      the fleet's quarantine on RabbitMQ instead of a store\n"
    "                      (amqp://USER[:PASS]@HOST[:PORT]/VHOST; the password, when the URL has\n"
    "                      none: $PILLBOX_AMQP_PASSWORD)\n"
    "  --kafka HOST:PORT[,HOST:PORT...] --topic T\n"
    "                      the fleet's quarantine on Kafka instead of a store\n"
    "  --fleet-key FILE    with --redis, --amqp or --kafka: the key the workers sign dead letters with\n"
    "                      (default $PILLBOX_FLEET_KEY); each record shows whether its signature is\n"
    "                      valid, and Reproduce, Minimize, Replay and the bundle act only on valid ones\n"
    "  --trust-unsigned    with --redis, --amqp or --kafka: act on records without a valid signature too\n"
    "  --listen HOST:PORT  where to listen (default 127.0.0.1:8080; port 0: a free port)\n"
    "  --token-file FILE   where the access token goes (default: serve.token in the store; with\n"
    "                      --redis, serve-redis-HASH.token in the default store directory, one per\n"
    "                      Redis and stream; with --amqp, serve-amqp-HASH.token, one per broker,\n"
    "                      user, vhost and queue; with --kafka, serve-kafka-HASH.token, one per\n"
    "                      bootstrap list and topic; the directory created 0700 when missing)\n"
    "\n"
    "exit codes: 0 stopped by SIGINT or SIGTERM, 2 usage error or no usable --store, 3 the store,\n"
    "Redis, RabbitMQ or Kafka cannot be opened, the address cannot be listened on (in use), another serve\n"
    "holds the token file, or the token cannot be written\n";

int serve_error(const std::string& message, int exit_code) { return command_error("serve", message, exit_code); }

// What the console shows, and where its token goes.
struct Opened {
  std::unique_ptr<StoreAccess> store;  // --store: kept open while it serves
  std::unique_ptr<serve::ConsoleSource> source;
  std::string token_file;
};

// A fleet's console, opened by `open_source` with the fleet's key and
// --trust-unsigned. Its token goes to --token-file, else to
// serve-KIND-HASH.token in the default store directory (no store is
// opened), HASH of `names` (the broker and the queue, never a password):
// each fleet's console has its own file, never a store's serve.token.
template <typename OpenSource>
Expected<Opened> open_fleet(const Args& args, const std::string& kind, const std::string& names,
                            OpenSource open_source) {
  Opened opened;
  if (auto file = args.value("token-file")) {
    opened.token_file = *file;
  } else {
    auto dir = store::resolve_store_dir("");
    if (!dir) return Error{dir.error() + " (or give --token-file FILE)", ErrorCode::kUsage};
    if (auto s = store::prepare_store_dir(*dir); !s) return Error{s.message(), ErrorCode::kSetup};
    opened.token_file = *dir + "/serve-" + kind + "-" + sha256_hex(names).substr(0, 12) + ".token";
  }
  auto key = read_fleet_key(args);
  if (!key) return Error{key.error(), ErrorCode::kUsage};
  auto source =
      open_source(serve::FleetTrust{std::move(*key), args.value("fleet-key").value_or(""), args.flag("trust-unsigned")});
  if (!source) return Error{source.error(), source.error_code()};
  opened.source = std::move(*source);
  return opened;
}

// --redis URL --stream NAME.
Expected<Opened> open_redis(const Args& args) {
  auto fleet = read_fleet_target(
      args, "--redis needs --stream NAME (the stream the workers read; its dead letters are NAME:dlq)");
  if (!fleet) return Error{fleet.error(), fleet.error_code()};
  return open_fleet(args, "redis", fleet->address.describe() + " " + fleet->stream, [&](serve::FleetTrust trust) {
    return serve::RedisSource::open(fleet->address, fleet->stream, std::move(trust));
  });
}

// --amqp URL --queue NAME.
Expected<Opened> open_amqp(const Args& args) {
  auto target = read_amqp_target(args);
  if (!target) return Error{target.error(), target.error_code()};
  return open_fleet(args, "amqp", target->address.describe() + " " + target->queue, [&](serve::FleetTrust trust) {
    return serve::AmqpSource::open(target->address, target->queue, std::move(trust));
  });
}

// --kafka BROKERS --topic T.
Expected<Opened> open_kafka(const Args& args) {
  auto target = read_kafka_target(args);
  if (!target) return Error{target.error(), target.error_code()};
  return open_fleet(args, "kafka", target->bootstrap.joined() + " " + target->topic, [&](serve::FleetTrust trust) {
    return serve::KafkaSource::open(target->bootstrap, target->topic, std::move(trust));
  });
}

Expected<Opened> open_store(const Args& args) {
  auto store = open_existing_store(args);
  if (!store) return Error{store.error(), store.error_code()};
  Opened opened;
  opened.store = std::move(*store);
  StoreAccess& a = *opened.store;
  opened.source = std::make_unique<serve::StoreSource>(serve::ConsoleStore{a.store.db(), *a.quarantine, a.store.dir()});
  opened.token_file = args.value("token-file").value_or(serve::token_path(a.store.dir()));
  return opened;
}

}  // namespace

int serve_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {{"store"}, {"redis"}, {"stream"}, {"amqp"}, {"queue"}, {"kafka"}, {"topic"}, {"token-file"}, {"listen"},
                                     {"help", false}};
  options.insert(options.end(), kFleetKeyOptions.begin(), kFleetKeyOptions.end());
  int exit_code = kExitOk;
  auto args = parse_command(argc, argv, 2, options, "serve", kHelp, exit_code);
  if (!args) return exit_code;
  if (!args->positional().empty()) return serve_error("unexpected argument '" + args->positional()[0] + "'", kExitUsage);
  if (args->has_dashdash()) return serve_error("unexpected '--'", kExitUsage);
  if (args->value("store") && args->value("redis")) {
    return serve_error("give --store DIR or --redis URL --stream NAME, not both", kExitUsage);
  }
  if (args->value("stream") && !args->value("redis")) {
    return serve_error("--stream goes with --redis URL (the fleet's quarantine); a store is --store DIR", kExitUsage);
  }
  if (args->value("queue") && !args->value("amqp")) {
    return serve_error("--queue goes with --amqp URL (the fleet's quarantine on RabbitMQ); a store is --store DIR",
                       kExitUsage);
  }
  if (args->value("topic") && !args->value("kafka")) {
    return serve_error("--topic goes with --kafka BROKERS (the fleet's quarantine on Kafka); a store is --store DIR",
                       kExitUsage);
  }
  if (auto key = read_fleet_key(*args); !key) return serve_error(key.error(), kExitUsage);
  auto address = serve::parse_listen_address(args->value("listen").value_or("127.0.0.1:8080"));
  if (!address) return serve_error(address.error(), kExitUsage);

  // SIGINT and SIGTERM wait for run_until_signal from now on: one sent as
  // soon as the URL is printed (a test, a service manager) must stop serve
  // cleanly, not kill it before its handler exists (seen under ASan: exit
  // 143). Blocked before any thread starts, so every thread inherits it.
  const sigset_t stop_set = serve::stop_signal_set();
  pthread_sigmask(SIG_BLOCK, &stop_set, nullptr);

  auto opened = args->value("kafka")  ? open_kafka(*args)
                : args->value("amqp") ? open_amqp(*args)
                : args->value("redis") ? open_redis(*args)
                                       : open_store(*args);
  if (!opened) return serve_error(opened.error(), exit_code_for(opened.error_code()));
  serve::ConsoleServer server(*opened->source);
  // Bound before the token is written: a serve that cannot listen leaves
  // the running one's token (and everything else) as it was.
  if (auto port = server.bind(*address); !port) return serve_error(port.error(), exit_code_for(port.error_code()));
  // One serve per token file (serve_lock.h); held until exit.
  auto lock = serve::take_serve_lock(opened->token_file, server.url());
  if (!lock) return serve_error(lock.error(), kExitSetup);
  auto token = serve::write_new_token_file(opened->token_file);
  if (!token) return serve_error(token.error(), kExitSetup);

  // The token's place is told before the URL: whoever waits for the URL on
  // stdout (a script, a test) finds the token file already named.
  std::fprintf(stderr, "pillbox serve: %s on %s; actions need the token in %s; Ctrl-C stops\n",
               server.url().c_str(), opened->source->location().c_str(), opened->token_file.c_str());
  std::printf("%s\n", server.url().c_str());
  std::fflush(stdout);
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
