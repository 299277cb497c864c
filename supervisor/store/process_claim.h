#pragma once
// Who holds a claim in the store, as text: "host:pid:start-time:boot-id".
// The start time (field 22 of /proc/PID/stat) with the pid names one
// process, not a later one that reused the pid; the boot id tells a claim
// made before the host rebooted, whose start time means nothing now.
// Replay claims records with it (replay_store.h), runs claim tasks
// (ledger.h): a claim whose process is gone is taken over, one whose process
// lives is respected.
#include <string>
#include <string_view>

namespace pillbox::store {

// This host's name, as claims and run rows record it.
std::string host_name();
// This process's claim token (computed once).
const std::string& process_claim_token();
// The token process `pid` of this host would claim with ("" for the start
// time when there is no such process).
std::string claim_token_of(long pid);

enum class ClaimHolder {
  kLive,       // a live process of this host, this boot
  kGone,       // of this host, and that process is no more (dead, pid reused, another boot)
  kOtherHost,  // made on another host: whether it lives cannot be told from here
};

// What became of the process that made `token`. Tokens of three fields
// (host:pid:start-time, written before the boot id was added) are judged
// on the pid and start time alone. A token that does not parse is gone.
ClaimHolder claim_holder(std::string_view token);

}  // namespace pillbox::store
