// pillbox quarantine patch ID (--payload-file F | --set-arg K=V ...) --note TEXT [--json]:
// an operator's fix of a record, stored as its next revision beside the
// original (the quarantine's QuarantineSource::patch does the work, over
// supervisor/ops/patch_record.h; this file parses and prints).
#include <fcntl.h>

#include <cstdio>
#include <string>

#include "shared/task_input.h"
#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/fleet_key_option.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/io/regular_file.h"
#include "supervisor/io/terminal_text.h"
#include "supervisor/ops/patch_record.h"
#include "supervisor/store/actor.h"

namespace pillbox::cli {
namespace {

// The options into a request; errors are usage errors, found before the store is touched.
// `id`: the record's, as the quarantine reads it (QuarantineSource::parse_id).
Expected<PatchRequest> read_request(const RecordsContext& c, std::string& id) {
  const Args& args = c.args;
  PatchRequest request;
  if (args.positional().size() != 1) return Error{"patch takes exactly one record ID (see: pillbox quarantine list)"};
  auto parsed = c.source.parse_id(args.positional()[0]);
  if (!parsed) return Error{parsed.error()};
  id = *parsed;
  const auto file = args.value("payload-file");
  const auto set_args = args.values("set-arg");
  if (file.has_value() == !set_args.empty()) {
    return Error{"patch what? give --payload-file F (a new payload) or --set-arg K=V (handler arguments, repeatable), "
                 "one of the two"};
  }
  const auto note = args.value("note");
  if (!note) return Error{"patch needs --note TEXT saying why (it goes into the audit trail)"};
  request.note = *note;
  if (file) {
    // Bounded like any payload; a FIFO or device is refused, not read.
    auto bytes = read_regular_file_at(AT_FDCWD, *file, 0, kMaxPayloadBytes);
    if (!bytes) return Error{"cannot read --payload-file " + *file + ": " + bytes.error()};
    request.payload = std::move(*bytes);
  }
  for (const auto& kv : set_args) {
    const auto eq = kv.find('=');
    if (eq == std::string::npos) return Error{"--set-arg takes K=V (got '" + kv + "')"};
    request.set_args.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return request;
}

}  // namespace

int quarantine_patch(const RecordsContext& c) {
  std::string id;
  auto request = read_request(c, id);
  if (!request) return quarantine_error(request.error(), kExitUsage);
  request->actor = actor_name("quarantine patch");
  auto before = c.source.get(id);  // only to say so when it was allowed; the patch reads it again
  const bool was_allowed = before && before->record.status == store::RecordStatus::kAllowed;
  auto revision = c.source.patch(id, std::move(*request));
  if (!revision) return quarantine_error(revision.error(), exit_code_for(revision.error_code()));
  if (c.args.flag("json")) {
    const nlohmann::json j = patched_record_json(*revision, c.source.id_json(id));
    std::printf("%s\n", j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  std::printf("record %s: revision %lld stored (%s); the original is unchanged. Run it: pillbox quarantine replay %s\n",
              id.c_str(), static_cast<long long>(revision->n), table_cell(revision->summary, 300).c_str(), id.c_str());
  // On the fleet a revision is signed with the fleet's key (fleet_revisions.h): without one it is unsigned.
  if (c.source.can().signatures) {
    if (auto key = read_fleet_key(c.args); key && !*key) {
      std::fprintf(stderr, "pillbox quarantine patch: no fleet key: this revision is unsigned, and a replay with the "
                           "key takes it only with --trust-unsigned (give --fleet-key FILE to sign it)\n");
    }
  }
  if (was_allowed) {
    std::printf("record %s was allowed to replay: it awaits review again, for what it runs now is the new revision "
                "(pillbox quarantine allow %s)\n",
                id.c_str(), id.c_str());
  }
  return kExitOk;
}

}  // namespace pillbox::cli
