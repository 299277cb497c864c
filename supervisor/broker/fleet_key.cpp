#include "supervisor/broker/fleet_key.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "shared/regular_file_read.h"
#include "shared/sha256.h"

namespace pillbox::broker {
namespace {

constexpr std::size_t kMinKeyBytes = 32;
constexpr std::size_t kMaxKeyBytes = 4096;
constexpr std::string_view kVersion = "pillbox dead letter v1";
// An operator's allowance (fleet_allowance.h): its own tag, so that no
// dead letter's signature passes for an allowance, nor the reverse.
constexpr std::string_view kAllowanceVersion = "pillbox allowance v1";
// An operator's revision of a record (fleet_revisions.h): a tag of its own too.
constexpr std::string_view kRevisionVersion = "pillbox revision v1";

void append_sized(std::string& out, std::string_view bytes) {
  const auto n = static_cast<std::uint64_t>(bytes.size());
  for (int shift = 56; shift >= 0; shift -= 8) out += static_cast<char>((n >> shift) & 0xff);
  out.append(bytes);
}

std::string hmac_hex(const std::string& key, const std::string& data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (::HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), reinterpret_cast<const unsigned char*>(data.data()),
             data.size(), mac, &len) == nullptr) {
    return "";  // never with SHA-256 in memory; an empty sig matches nothing
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < len; ++i) {
    out += kHex[mac[i] >> 4];
    out += kHex[mac[i] & 0xf];
  }
  return out;
}

const char* const kHowToMake =
    "make one with: (umask 077; openssl rand -hex 32 > FILE), and give the same file to every worker and operator "
    "of the fleet";

}  // namespace

std::string_view to_string(Signature s) {
  switch (s) {
    case Signature::kUnchecked: return "unchecked";
    case Signature::kValid: return "valid";
    case Signature::kMissing: return "missing";
    case Signature::kBad: return "bad";
  }
  return "unchecked";
}

Expected<FleetKey> FleetKey::load(const std::string& path) {
  const std::string named = "fleet key " + path;
  UniqueFd fd = open_for_reading_at(AT_FDCWD, path, O_NOFOLLOW);
  if (!fd.valid()) return Error{named + ": " + std::strerror(errno) + " (" + kHowToMake + ")"};
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Error{named + ": " + std::strerror(errno)};
  if (!S_ISREG(st.st_mode)) return Error{named + " is not a regular file"};
  if (st.st_uid != ::geteuid() && st.st_uid != 0) {
    return Error{named + " belongs to uid " + std::to_string(st.st_uid) + ", neither this user nor root"};
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Error{named + " has mode " + mode + ": others may read the secret; chmod 600 " + path};
  }
  RegularFileRead read = read_whole_regular_fd(fd.get(), kMaxKeyBytes);
  if (read.failure == RegularFileRead::Failure::kTooLarge) {
    return Error{named + " is larger than " + std::to_string(kMaxKeyBytes) + " bytes: is it the right file?"};
  }
  if (read.failure != RegularFileRead::Failure::kNone) {
    return Error{named + ": " + (read.failure == RegularFileRead::Failure::kSystem ? std::strerror(read.error)
                                                                                : "not a regular file")};
  }
  if (read.bytes.size() < kMinKeyBytes) {
    return Error{named + " holds " + std::to_string(read.bytes.size()) + " bytes; a key has at least " +
                 std::to_string(kMinKeyBytes) + " (" + kHowToMake + ")"};
  }
  return FleetKey(std::move(read.bytes), st.st_uid);
}

namespace {

std::string canonical_form(std::string_view version, const std::string& dlq, const SignedFields& fields,
                           const std::string* payload_sha256) {
  std::vector<const std::pair<std::string, std::string>*> sorted;
  for (const auto& f : fields) {
    if (f.first != "sig") sorted.push_back(&f);
  }
  // Stable: a repeated field keeps the order it was written in.
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  std::string out;
  append_sized(out, version);
  append_sized(out, dlq);
  for (const auto* f : sorted) {
    append_sized(out, f->first);
    if (f->first == "payload") {
      append_sized(out, payload_sha256 != nullptr ? *payload_sha256 : sha256_hex(f->second));
    } else {
      append_sized(out, f->second);
    }
  }
  return out;
}

}  // namespace

std::string canonical_dead_letter(const std::string& dlq, const SignedFields& fields, const std::string* payload_sha256) {
  return canonical_form(kVersion, dlq, fields, payload_sha256);
}

std::string FleetKey::sign(const std::string& dlq, const SignedFields& fields) const {
  return hmac_hex(secret_, canonical_dead_letter(dlq, fields));
}

Signature FleetKey::verify(const std::string& dlq, const SignedFields& fields, const std::string* payload_sha256) const {
  return verify_form(kVersion, dlq, fields, payload_sha256);
}

std::string FleetKey::sign_allowance(const std::string& dlq, const SignedFields& fields) const {
  return hmac_hex(secret_, canonical_form(kAllowanceVersion, dlq, fields, nullptr));
}

Signature FleetKey::verify_allowance(const std::string& dlq, const SignedFields& fields) const {
  return verify_form(kAllowanceVersion, dlq, fields, nullptr);
}

std::string FleetKey::sign_revision(const std::string& dlq, const SignedFields& fields) const {
  return hmac_hex(secret_, canonical_form(kRevisionVersion, dlq, fields, nullptr));
}

Signature FleetKey::verify_revision(const std::string& dlq, const SignedFields& fields) const {
  return verify_form(kRevisionVersion, dlq, fields, nullptr);
}

Signature FleetKey::verify_form(std::string_view version, const std::string& dlq, const SignedFields& fields,
                                const std::string* payload_sha256) const {
  const std::string* sig = nullptr;
  for (const auto& [name, value] : fields) {
    if (name != "sig") continue;
    if (sig != nullptr) return Signature::kBad;  // two: which one is meant is not for the record to say
    sig = &value;
  }
  if (sig == nullptr) return Signature::kMissing;
  const std::string expected = hmac_hex(secret_, canonical_form(version, dlq, fields, payload_sha256));
  if (expected.empty() || sig->size() != expected.size()) return Signature::kBad;
  return CRYPTO_memcmp(sig->data(), expected.data(), expected.size()) == 0 ? Signature::kValid : Signature::kBad;
}

}  // namespace pillbox::broker
