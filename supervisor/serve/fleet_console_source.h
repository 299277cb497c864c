#pragma once
// The console over the fleet's quarantine, whichever broker holds it: the
// workers' dead letters (supervisor/broker/fleet_dead_letters.h) with the
// pages and API of the store's console, read through FleetQuarantineSource
// as `quarantine list/show/stats --json` reads them. What every broker's
// console does is written once here: a connection made again when the last
// one broke (503 while the broker cannot be reached, and the console goes
// on), /metrics counted on a connection of its own at most once a second,
// the fleet key and --trust-unsigned, and the CLI options its jobs run with.
// A broker's part is thin: how to connect and whether the connection still
// answers (redis_console_source.h: --redis URL --stream NAME;
// amqp_console_source.h: --amqp URL --queue NAME).
// /metrics: pillbox_fleet_up, and store_metrics.h's quarantine families
// counted from the dead letters, at most once a second (less often when
// counting takes longer).
#include <chrono>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/broker/fleet_key.h"
#include "supervisor/broker/fleet_quarantine_source.h"
#include "supervisor/serve/console_source.h"

namespace pillbox::serve {

// How the console treats the dead letters' signatures (broker/fleet_key.h),
// as serve was told: its key (and the --fleet-key argument its jobs are
// given; "" when it came from $PILLBOX_FLEET_KEY, which they inherit), and
// --trust-unsigned.
struct FleetTrust {
  std::optional<broker::FleetKey> key;
  std::string key_arg;
  bool trust_unsigned = false;
};

// What names one fleet's quarantine in words, pages and jobs; never a
// password.
struct FleetNames {
  std::string broker;    // "Redis", "RabbitMQ"
  std::string at;        // the broker as its errors name it: "redis://HOST:PORT/DB"
  std::string location;  // the page header's: "redis://HOST:PORT/DB NAME:dlq"
  std::string workers;   // whose workers write it: "stream NAME", "queue NAME"
  std::vector<std::string> cli_args;  // {"--redis", URL, "--stream", NAME}
};

class FleetSource : public ConsoleSource {
 public:
  std::string location() const override { return names_.location; }
  // The broker's options, then the trust's: the jobs (reproduce, replay)
  // check signatures as the console does.
  std::vector<std::string> cli_source_args() const override;
  ApiReply list_tasks(const Query& query) override;
  ApiReply live_runs() override;
  std::string metrics() override;

 protected:
  FleetSource(FleetNames names, FleetTrust trust) : names_(std::move(names)), trust_(std::move(trust)) {}

  // The records over `dead_letters` (the broker part's connection, which
  // it keeps until disconnect()), checked with the fleet's key.
  void use(broker::FleetDeadLetters& dead_letters);

  // The broker's part.
  // A new connection to the dead letters, kept by the broker part until
  // disconnect(); nullptr with the reply that says why not: unreachable()
  // when the broker cannot be reached, a 500 for what it answered (a key
  // or queue of another type).
  virtual broker::FleetDeadLetters* connect(ApiReply& error) = 0;
  virtual void disconnect() = 0;
  // Whether the connection kept still answers, by a round trip: one the
  // broker dropped since the last request (a restart) is found here and
  // made again, not failed.
  virtual bool answers() = 0;
  // After a call on it failed: the connection is fine (the failure is the
  // request's), broke (made again by the next request), or is kept but the
  // broker cannot serve now (Redis's LOADING, BUSY).
  enum class Link { kUp, kBusy, kBroken };
  virtual Link link() = 0;
  // The dead letters on a connection of their own (for /metrics, which
  // runs beside the server's lock), unkeyed.
  virtual Expected<std::unique_ptr<broker::FleetDeadLetters>> open_apart() const = 0;

  // 503: the broker at names().at cannot be reached, and why (`detail`).
  ApiReply unreachable(const std::string& detail) const;

  // The quarantine, connected again when the last connection broke;
  // nullptr with `error` when it cannot be.
  QuarantineSource* records(ApiReply& error) override;
  // 503 when the broker cannot be reached or cannot serve now (a broken
  // connection is dropped, to be made again); else as ConsoleSource's.
  ApiReply failure(const std::string& message, ErrorCode code, int usage_status = 400) override;
  int malformed_id_status() const override { return 400; }
  std::optional<std::string> refused(const store::ListFilter& filter) const override;
  bool attach_payload(QuarantineSource& source, const SourcedRecord& r, PendingDownload& download) override;
  bool trusts_unsigned() const override { return trust_.trust_unsigned; }

 private:
  // records_ and the broker's connection, gone.
  void drop();

  const FleetNames names_;
  const FleetTrust trust_;
  std::optional<broker::FleetQuarantineSource> records_;  // under the server's lock; over the broker part's connection

  std::mutex metrics_lock_;  // what follows: metrics() runs beside the server's lock
  std::string metrics_text_;
  std::chrono::steady_clock::time_point metrics_at_{};  // when the last count ended
  std::chrono::steady_clock::duration metrics_scan_{};   // how long it took
};

}  // namespace pillbox::serve
