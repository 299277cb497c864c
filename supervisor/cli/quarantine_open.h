#pragma once
// Where the quarantine verbs, reproduce and minimize find their records: the
// store (--store DIR, or its default) or the fleet's quarantine (--redis URL
// --stream NAME, the workers' dead letters in NAME:dlq, checked with
// --fleet-key), opened as one QuarantineSource.
#include <memory>
#include <string>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/cli/args.h"
#include "supervisor/cli/store_access.h"
#include "supervisor/ops/quarantine_source.h"

namespace pillbox::cli {

struct OpenedQuarantine {
  std::unique_ptr<StoreAccess> store;               // the store's, or
  std::unique_ptr<broker::FleetDeadLetters> fleet;  // a broker's
  std::unique_ptr<QuarantineSource> source;         // over one of them
};

// What the quarantine open_quarantine would open can do, known before
// anything is opened (a verb it cannot do is refused without reading it).
QuarantineCapabilities capabilities_of(const Args& args);

// `no_stream`: the error for --redis without --stream, in the command's
// words. `create_store`: a store is made when missing (a verb that adds
// records). `then`: a usage error of the caller's own about its arguments,
// said after the errors about where (--store, --redis, --stream,
// --fleet-key on the store) and before anything is opened. Errors
// carry their code: usage for the arguments, setup for a store or broker
// that cannot be used.
Expected<OpenedQuarantine> open_quarantine(const Args& args, const std::string& no_stream, bool create_store,
                                           const Status& then);

}  // namespace pillbox::cli
