#pragma once
// `pillbox quarantine patch` on the fleet's quarantine, written once for
// every broker (docs/distributed.md, "Patches on the fleet"): an operator's
// new payload for a record, kept as its next revision beside the unchanged
// dead letter, as the store keeps one (supervisor/ops/patch_record.h), with
// the store's refusals.
//
//   bytes  kept apart from the record's state by the broker's adapter
//          (FleetDeadLetters::keep_revision_payload: Redis's hash
//          NAME:dlq:revisions:ID by sha256, RabbitMQ's stream
//          NAME.dlq.revisions), first;
//   state  then the record's state names the revision (FleetState::revisions:
//          n, sha256, size, where, who, when, note, what changed) with an
//          audit entry "patched", by one compare and set that refuses a
//          record patched meanwhile (two patches at once: one is kept, the
//          other refused and said so, never one lost) or taken by a replay.
//          Bytes kept whose state write never came (a patch killed between
//          the two) are named by no state and never read.
//
// Trust: the state is anyone's who can write it (NAME:dlq:state,
// NAME.dlq.state), and so are the kept bytes. With a fleet key each
// revision is signed (a version tag of its own, over the dead-letter
// stream's name, the record's id and original payload's sha256, the
// revision's number, sha256, size, who, when, note and what changed), and
// a replay runs a revision only on a valid signature (or --trust-unsigned,
// which a fleet without a key needs anyway); bytes read back are always
// checked against the sha256 and size its state names. The state's order
// is anyone's, the numbers are signed: a patch numbers its revision above
// all before it, and a newest revision that is not (an older signed one
// copied to the end) is never run, key or not. What a signature cannot
// stop: a revision removed from the state by whoever can write it (the
// replay then runs the one before, or the original), as a revoked
// allowance written back (fleet_allowance.h).
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "shared/status.h"
#include "supervisor/broker/fleet_dead_letters.h"
#include "supervisor/ops/patch_record.h"
#include "supervisor/store/revision_store.h"

namespace pillbox::broker {

// Stores `request` (a payload; arguments are refused: fleet tasks carry
// none) as record `id`'s next revision, refused (kUsage) as patch_record
// refuses, and when another patch came first. An allowed record goes back
// to quarantined, its allowance revoked and audited. The revision as the
// store's (record_id 0: fleet ids are text).
Expected<store::Revision> patch_fleet_record(FleetDeadLetters& dead_letters, const std::string& id,
                                             const PatchRequest& request, std::int64_t now_ms);

// The newest revision of `state`, or nullptr (never patched).
const FleetRevision* newest_revision(const FleetState& state);

// What the fleet key (`dead_letters.key()`) says of `revision` of `record`:
// kUnchecked without a key, kMissing unsigned, kValid or kBad.
Signature revision_signature(const FleetDeadLetters& dead_letters, const FleetRecord& record,
                             const FleetRevision& revision);

// Whether a redrive may put back `record`'s newest revision: a valid
// signature, or any with --trust-unsigned. The error names the record and
// revision, what is wrong and what to do.
Status check_newest_revision(const FleetDeadLetters& dead_letters, const FleetRecord& record, bool trust_unsigned);

// What a redrive of `record` puts back: its newest revision's payload,
// checked (check_newest_revision, then its bytes as revision_payload reads
// them), or revision 0 with no bytes: the dead letter's own. kUsage errors
// say why the record is not redriven (it is left, not charged).
struct RedrivePayload {
  std::int64_t revision = 0;
  std::string bytes;   // revision > 0: its payload
  std::string sha256;  // of those bytes
};
Expected<RedrivePayload> redrive_payload(FleetDeadLetters& dead_letters, const FleetRecord& record,
                                         bool trust_unsigned);

// show --json's "revisions": revision_json of each (as the store's), with
// its "signature" (valid, missing, bad, unchecked).
nlohmann::json fleet_revisions_json(const FleetDeadLetters& dead_letters, const FleetRecord& record);

}  // namespace pillbox::broker
