// pillbox quarantine show / export on the store: one record, read in full
// or written out, through the shared printers (quarantine_print.h).
#include <string>

#include "supervisor/cli/commands.h"
#include "supervisor/cli/exit_code.h"
#include "supervisor/cli/quarantine_print.h"
#include "supervisor/cli/quarantine_verbs.h"
#include "supervisor/store/revision_store.h"

namespace pillbox::cli {
namespace {

// The record with its attempts and audit trail, as one JSON object.
Expected<nlohmann::json> full_record(const QuarantineContext& c, const store::QuarantineRecord& r) {
  return stored_record_json(c.quarantine, r, c.store_dir);
}

// export --revision N: the payload of the record's revision N (a patch),
// checked against the other options first.
Expected<std::string> revision_payload(const QuarantineContext& c, std::int64_t id, const std::string& wanted) {
  if (c.args.flag("minimized")) return Error{"give --minimized or --revision N, not both", ErrorCode::kUsage};
  if (c.args.flag("bundle")) {
    return Error{"--revision goes without --bundle: a bundle holds the original payload and the command that runs it",
                 ErrorCode::kUsage};
  }
  auto n = parse_record_id(wanted);  // a positive number, as record ids are
  if (!n) return Error{"--revision takes a revision number, 1 or more (quarantine show " + std::to_string(id) +
                           " lists them)",
                       ErrorCode::kUsage};
  auto revisions = store::RevisionStore(c.database).list(id);
  if (!revisions) return Error{revisions.error()};
  for (const auto& v : *revisions) {
    if (v.n == *n) return v.payload_sha256;
  }
  return Error{"record " + std::to_string(id) + " has no revision " + wanted + " (quarantine show " +
                   std::to_string(id) + " lists them; quarantine patch makes them)",
               ErrorCode::kUsage};
}

}  // namespace

int quarantine_show(const QuarantineContext& c) {
  auto id = parse_record_id(c.args.positional()[0]);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  auto r = find_record(c.quarantine, *id);
  if (!r) return quarantine_error(r.error(), kExitUsage);
  auto full = full_record(c, *r);
  if (!full) return quarantine_error(full.error(), kExitSetup);
  ShownRecord shown{*id, *r, std::move(*full), c.quarantine.payloads().get(r->entry.payload_sha256), std::nullopt,
                    "pillbox reproduce " + std::to_string(*id)};
  if (!r->minimized_sha256.empty()) {
    if (auto mini = c.quarantine.payloads().get(r->minimized_sha256)) shown.minimized_size = mini->size();
  }
  return print_record(shown, c.args.flag("json"));
}

int quarantine_export(const QuarantineContext& c) {
  auto id = parse_record_id(c.args.positional()[0]);
  if (!id) return quarantine_error(id.error(), kExitUsage);
  if (auto s = check_export_options(c.args); !s) return quarantine_error(s.message(), kExitUsage);
  auto r = find_record(c.quarantine, *id);
  if (!r) return quarantine_error(r.error(), kExitUsage);
  std::string sha = r->entry.payload_sha256;
  if (const auto wanted = c.args.value("revision")) {
    auto revision = revision_payload(c, *id, *wanted);
    if (!revision) return quarantine_error(revision.error(), exit_code_for(revision.error_code()));
    sha = *revision;
  } else if (c.args.flag("minimized")) {
    if (r->minimized_sha256.empty()) {
      return quarantine_error("record " + std::to_string(*id) + " has no minimized payload (pillbox minimize " +
                                  std::to_string(*id) + ")", kExitUsage);
    }
    sha = r->minimized_sha256;
  }
  auto payload = c.quarantine.payloads().get(sha);  // checked against its hash
  if (!payload) return quarantine_error(payload.error(), kExitSetup);
  nlohmann::json full;
  if (c.args.flag("bundle")) {
    auto f = full_record(c, *r);
    if (!f) return quarantine_error(f.error(), kExitSetup);
    full = std::move(*f);
  }
  return export_record(c.args, *id, *r, full, *payload, sha);
}

}  // namespace pillbox::cli
