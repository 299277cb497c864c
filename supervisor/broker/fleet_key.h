#pragma once
// The fleet's key (`--fleet-key FILE` or $PILLBOX_FLEET_KEY), shared by a
// fleet's workers and operators. Workers sign each dead letter; verbs check
// the signature before running what it names, since anyone who reaches an
// unauthenticated Redis can XADD one (docs/distributed.md, The fleet key:
// signed dead letters).
//
// `sig` is HMAC-SHA-256 (64 hex digits) over: a version tag, the dlq stream's
// name (a letter copied to another stream does not verify), then every field
// but `sig` sorted by name, each with its length; the payload as its SHA-256,
// so a listing that leaves a large payload unread can check its claimed hash.
#include <sys/types.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/status.h"

namespace pillbox::broker {

using SignedFields = std::vector<std::pair<std::string, std::string>>;

// Where a broker's dead letter has headers (RabbitMQ, Kafka), its `sig`
// rides in this one.
inline constexpr std::string_view kSignatureHeader = "pillbox-sig";

// What a reader knows of a dead letter's signature.
enum class Signature {
  kUnchecked,  // the reader has no fleet key
  kValid,      // signed with the reader's key, unchanged since
  kMissing,    // no `sig` field: a worker without a key, or not a worker at all
  kBad,        // a `sig` that this key did not make over these fields
};
std::string_view to_string(Signature s);  // unchecked, valid, missing, bad

class FleetKey {
 public:
  // The key in `path`: a regular file owned by this user (or root), readable
  // and writable by nobody else (mode 0600 or 0400), of 32 to 4096 bytes,
  // taken as bytes exactly. Errors say what is wrong and how to make one.
  static Expected<FleetKey> load(const std::string& path);
  // A key from bytes (tests, and load).
  explicit FleetKey(std::string secret, uid_t owner = 0) : secret_(std::move(secret)), owner_(owner) {}

  // The uid that owns the key's file (load): the worker refuses a key its
  // tasks would run as, since they could read it and sign anything.
  uid_t owner() const { return owner_; }

  // The `sig` value for a dead letter with `fields`, in stream `dlq`.
  std::string sign(const std::string& dlq, const SignedFields& fields) const;
  // kValid, kMissing or kBad. `payload_sha256`, when given, stands for the
  // payload's value (a listing that did not read it: its record's claim).
  Signature verify(const std::string& dlq, const SignedFields& fields,
                   const std::string* payload_sha256 = nullptr) const;
  // The same for an operator's allowance of a record in `dlq`
  // (fleet_allowance.h), under a version tag of its own: a dead letter's
  // `sig` never passes for an allowance's, nor the reverse.
  std::string sign_allowance(const std::string& dlq, const SignedFields& fields) const;
  Signature verify_allowance(const std::string& dlq, const SignedFields& fields) const;
  // The same for an operator's revision of a record (fleet_revisions.h),
  // under a version tag of its own again.
  std::string sign_revision(const std::string& dlq, const SignedFields& fields) const;
  Signature verify_revision(const std::string& dlq, const SignedFields& fields) const;

 private:
  Signature verify_form(std::string_view version, const std::string& dlq, const SignedFields& fields,
                        const std::string* payload_sha256) const;

  std::string secret_;
  uid_t owner_ = 0;
};

// The canonical bytes the signature covers (see above).
std::string canonical_dead_letter(const std::string& dlq, const SignedFields& fields,
                                  const std::string* payload_sha256 = nullptr);

}  // namespace pillbox::broker
