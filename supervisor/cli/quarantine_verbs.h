#pragma once
// The verbs of `pillbox quarantine`, one file each group: the dispatcher
// (quarantine_command.cpp) opens the store, or, given --redis URL --stream
// NAME, the fleet's quarantine on Redis (supervisor/broker/
// fleet_quarantine.h), and hands it to them. All print through
// quarantine_print.h.
#include <memory>
#include <optional>
#include <string>

#include "supervisor/broker/fleet_quarantine.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/quarantine_open.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/ops/quarantine_source.h"
#include "supervisor/ops/store_quarantine_source.h"
#include "supervisor/store/quarantine_store.h"

namespace pillbox::cli {

// What every store-only verb reads: the store's quarantine and database.
struct QuarantineContext {
  const Args& args;
  store::QuarantineStore& quarantine;
  store::Database& database;
};

int quarantine_error(const std::string& message, int exit_code);  // prints "pillbox quarantine: ..."
// The one record reproduce and minimize act on: record ID of the store
// (--store DIR, which must exist) or of the fleet's quarantine (--redis URL
// --stream NAME), allowed to run there (check_runnable, --trust-unsigned).
// Errors carry their code: usage for the arguments, an unknown id or an
// unsigned record; setup for a store or Redis that cannot be used.
struct OpenedRecord : OpenedQuarantine {
  SourcedRecord record;
};
Expected<OpenedRecord> open_one_record(const Args& args);

// --status/--kind/--fingerprint/--key/--since/--source/--handler/--raise-site, checked.
Expected<store::ListFilter> read_filter(const Args& args);
// --raise-site's value: a raise site's id (shared/raise_site.h), or a usage
// error saying where the ids are.
Status check_raise_site_id(const std::string& text);

// The verbs that read and discard records, on either quarantine
// (quarantine_records.cpp): the dispatcher hands them the store's or the
// fleet's as a QuarantineSource.
struct RecordsContext {
  const Args& args;
  QuarantineSource& source;
};
int quarantine_list(const RecordsContext& c);     // list
int quarantine_show(const RecordsContext& c);     // show ID
int quarantine_stats(const RecordsContext& c);    // stats
int quarantine_export(const RecordsContext& c);   // export ID -o FILE [--bundle]
int quarantine_discard(const RecordsContext& c);  // discard ID... --reason TEXT
int quarantine_allow(const RecordsContext& c);    // allow (ID... | filters) [--revoke] [--note TEXT]
int quarantine_replay(const RecordsContext& c);   // replay (quarantine_replay.cpp)
int quarantine_patch(const RecordsContext& c);    // patch ID (--payload-file F | --set-arg K=V...) --note TEXT (quarantine_patch.cpp)

// The verbs of the store's quarantine only.
int quarantine_import(const QuarantineContext& c);  // import FILES...

}  // namespace pillbox::cli
