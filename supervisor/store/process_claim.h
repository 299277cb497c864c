#pragma once
// A claim in the store names a process: "host:pid:start-time:boot-id". The
// start time tells a reused pid apart; the boot id, a claim from before a
// reboot. Used by the ledger (tasks) and replay (records): a gone process's
// claim is taken over, a live one's respected.
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

// What became of the process that made `token`. Old three-field tokens (no
// boot id) are judged on pid and start time. One that does not parse is gone.
ClaimHolder claim_holder(std::string_view token);

}  // namespace pillbox::store
