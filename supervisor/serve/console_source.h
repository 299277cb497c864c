#pragma once
// What the console shows, behind one interface: the store's quarantine
// (store_console_source.h) or the fleet's dead letters on a broker
// (fleet_console_source.h). Each call answers with console_api.h's objects
// and errors. The records' routes are written once here, over the back
// end's QuarantineSource, as the CLI's verbs are; what differs is virtual.
//
// Thread safety: the server calls every member but metrics() under one lock,
// unavailable() first; metrics() is safe from any thread without it (a
// scrape never waits for a slow page).
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "shared/status.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/serve/console_api.h"
#include "supervisor/serve/console_download.h"

namespace pillbox::serve {

class ConsoleSource {
 public:
  virtual ~ConsoleSource() = default;

  // Where the records are, for the page header: the store directory, or
  // "redis://HOST:PORT/DB NAME:dlq".
  virtual std::string location() const = 0;
  // The CLI's options that name this quarantine: {"--store", DIR} or
  // {"--redis", URL, "--stream", NAME}, for commands shown or run on it.
  // Shown: never a secret.
  virtual std::vector<std::string> cli_source_args() const = 0;
  // What a command run on it needs beside them, in its environment and
  // never shown: RabbitMQ's password ({"PILLBOX_AMQP_PASSWORD", ...}).
  virtual std::vector<std::pair<std::string, std::string>> cli_source_env() const { return {}; }

  // Why nothing can be read now, in words for the operator (503), or
  // nothing: asked before every other call of a request. A store whose
  // file was removed or replaced under the console (store_presence.h).
  virtual std::optional<std::string> unavailable() const { return std::nullopt; }

  // A record id from a URL or a body, as the CLI takes it (a store's
  // positive number, a fleet's entry id), or a kUsage error saying what an
  // id is here. Pure: safe without the lock.
  virtual Expected<std::string> checked_id(const std::string& text) const = 0;

  // The routes of console_api.h; `id` is the URL's text, unchecked. The
  // records' (written once, over records()):
  ApiReply list_records(const Query& query);
  ApiReply show_record(const std::string& id);
  ApiReply record_stats(const Query& query);
  // `body` {"reason": TEXT}; `actor` goes into the audit trail.
  ApiReply discard(const std::string& id, const std::string& body, const std::string& actor);
  // `body` allow_body's; the answer is allow --json's object. 404 no such
  // record, 409 being replayed, 400 a status a review does not move (resolved,
  // discarded; nothing changed).
  ApiReply allow(const std::string& id, const std::string& body, const std::string& actor);
  // At most the first `max_bytes` of the payload, for a preview.
  PayloadReply preview(const std::string& id, std::size_t max_bytes);
  // GET /api/records/ID/payload (`bundle` false) or /bundle: what to send,
  // found under the lock; finish_download (console_download.h) reads it
  // after the lock.
  PendingDownload find_download(const std::string& id, bool bundle);
  // `body` patch_body's (console_api.h); the answer is patch --json's
  // object. 404 no such record, 409 being replayed, 413 a payload over
  // kMaxWebPatchPayloadBytes, 400 any other refusal (nothing changed),
  // 500 the store.
  ApiReply patch(const std::string& id, const std::string& body, const std::string& actor);
  // What the back end's records can do (the record page offers a patch
  // form where can().patches), known without reading them.
  virtual QuarantineCapabilities can() const = 0;
  // The back end's own:
  virtual ApiReply list_tasks(const Query& query) = 0;
  virtual ApiReply live_runs() = 0;

  // GET /metrics's body, in the Prometheus text format (metrics_text.h).
  virtual std::string metrics() = 0;

 protected:
  // The quarantine for this request, or nullptr with the reply that says
  // why there is none now (Redis out of reach).
  virtual QuarantineSource* records(ApiReply& error) = 0;
  // failure_reply (console_api.h); the fleet's: 503 when Redis went away.
  virtual ApiReply failure(const std::string& message, ErrorCode code, int usage_status = 400);
  // The status of an id that is not one here (checked_id failed).
  virtual int malformed_id_status() const = 0;
  // A filter this back end cannot apply, in words (400), or nothing.
  virtual std::optional<std::string> refused(const store::ListFilter&) const { return std::nullopt; }
  // A download's payload, into `download`: the store's row and open file,
  // or the fleet's bytes, read and checked now; false with
  // `download.error` when it cannot be had (the store's 500; the fleet's
  // 409: not the bytes its record names, a conflict to say).
  virtual bool attach_payload(QuarantineSource& source, const SourcedRecord& r, PendingDownload& download) = 0;
  // Whether a bundle's reproduce.sh may run a record with no valid
  // signature (check_runnable): serve's --trust-unsigned.
  virtual bool trusts_unsigned() const { return false; }
  // Record `id` (the URL's text) and the quarantine it is in, or nothing
  // with the reply that says why (malformed_id_status, 404 no such record,
  // failure()).
  struct Found {
    QuarantineSource& source;
    SourcedRecord record;
  };
  std::optional<Found> find(const std::string& id, ApiReply& error);

 private:
  // records_filter and refused(): the filter, or nothing with the 400.
  std::optional<store::ListFilter> filter_of(const Query& query, bool paging, ApiReply& error) const;
};

}  // namespace pillbox::serve
