#include "supervisor/broker/kafka_attempts.h"

#include <algorithm>
#include <charconv>
#include <utility>

namespace pillbox::broker {
namespace {

constexpr std::string_view kMetadataPrefix = "pillbox-attempts@";
// Offset metadata is the committer's to write (a broker keeps up to
// offset.metadata.max.bytes, 4096 by default): shown cut when it is not ours.
constexpr std::size_t kMaxMetadataShown = 64;

// A delivery that began and has no end (yet): delivery_history.h's start marker.
std::string start_marker(const AttemptEntry& start) {
  RecordedDelivery d = recorded_start(start.delivery, start.worker, start.at_ms);
  d.note = "started";  // on Kafka every delivery writes its start, not a suspect's only
  return delivery_json(d);
}

}  // namespace

std::uint32_t next_delivery(const RecordAttempts& record) { return record.highest + 1; }

EntryHistory record_history(const RecordAttempts& record) {
  // kUnstarted: a delivery without a start entry never began (kafka_attempts.h).
  EntryHistory h = entry_history(next_delivery(record), record.deliveries, UnmarkedSuspect::kUnstarted);
  // A gap after the record's first entry is not retention's (it removes
  // the log's oldest entries, so only the deliveries before the first one
  // kept): entries were forged around it. Never begun, never charged.
  if (record.deliveries.empty()) return h;
  const std::uint32_t first_kept = record.deliveries.begin()->first;
  std::vector<std::uint32_t> lost;
  for (const std::uint32_t n : h.lost) {
    (n > first_kept && !record.deliveries.contains(n) ? h.unstarted : lost).push_back(n);
  }
  h.lost = std::move(lost);
  std::sort(h.unstarted.begin(), h.unstarted.end());
  return h;
}

void PartitionAttempts::add(const AttemptEntry& entry, std::int64_t log_offset) {
  log_end = std::max(log_end, log_offset + 1);
  if (entry.offset < committed) {
    ++older;
    return;
  }
  RecordAttempts& r = records[entry.offset];
  if (log_offset >= 0 && (r.first_log_offset < 0 || log_offset < r.first_log_offset)) r.first_log_offset = log_offset;
  r.highest = std::max(r.highest, entry.delivery);
  switch (entry.kind) {
    case AttemptEntryKind::kStart:
      // An end said more; a second start of the same delivery says nothing new.
      if (!r.deliveries.contains(entry.delivery)) r.deliveries[entry.delivery] = start_marker(entry);
      break;
    case AttemptEntryKind::kEnd:
      // Two ends of one delivery (two workers that both believed they held
      // the partition): the first one written holds.
      if (!r.ended.insert(entry.delivery).second) {
        ++r.conflicting;
        break;
      }
      r.deliveries[entry.delivery] = delivery_json(entry.end);
      break;
    case AttemptEntryKind::kSettled:
      if (r.settled) {
        ++r.conflicting;
        break;
      }
      r.settled = entry;
      break;
  }
}

void PartitionAttempts::add_read(const KafkaMessage& message) {
  ParsedAttemptEntry parsed = parse_attempt_entry(partition, message.key, message.value);
  if (parsed.entry && parsed.entry->group != group) {
    log_end = std::max(log_end, message.offset + 1);
    ++other_groups;
    return;
  }
  if (parsed.entry && parsed.entry->offset >= source_end) {
    parsed = {std::nullopt, "about record " + std::to_string(parsed.entry->offset) + ", past the partition's end (" +
                                std::to_string(source_end) + "): no worker had read it"};
  }
  if (parsed.entry) {
    add(*parsed.entry, message.offset);
    return;
  }
  log_end = std::max(log_end, message.offset + 1);
  if (unreadable++ == 0) {
    first_unreadable = "attempt-log offset " + std::to_string(message.offset) + ": " + parsed.why_not;
  }
}

void PartitionAttempts::forget_below(std::int64_t offset) {
  committed = std::max(committed, offset);
  records.erase(records.begin(), records.lower_bound(committed));
}

const RecordAttempts* PartitionAttempts::find(std::int64_t offset) const {
  const auto it = records.find(offset);
  return it == records.end() ? nullptr : &it->second;
}

PartitionAttempts fold_attempt_log(std::int32_t partition, std::int64_t committed,
                                   const std::vector<KafkaMessage>& read, std::int64_t read_end,
                                   std::int64_t source_end, const std::string& group) {
  PartitionAttempts p;
  p.partition = partition;
  p.group = group;
  p.committed = committed;
  p.source_end = source_end;
  p.log_end = read_end;
  for (const KafkaMessage& m : read) p.add_read(m);
  return p;
}

std::int64_t attempt_log_commit_offset(const PartitionAttempts& attempts, std::int64_t committed) {
  std::optional<std::int64_t> lowest;
  for (auto it = attempts.records.lower_bound(committed); it != attempts.records.end(); ++it) {
    const std::int64_t first = it->second.first_log_offset;
    if (first >= 0 && (!lowest || first < *lowest)) lowest = first;
  }
  return lowest.value_or(attempts.log_end);
}

std::string attempt_commit_metadata(std::int64_t log_offset) {
  return std::string(kMetadataPrefix) + std::to_string(log_offset);
}

AttemptLogStart parse_attempt_commit_metadata(std::string_view metadata) {
  const auto beginning = [&](const std::string& why) {
    return AttemptLogStart{std::nullopt, why + ": the attempt log is read from its beginning"};
  };
  if (metadata.empty()) return beginning("the commit has no metadata");
  if (metadata.starts_with(kMetadataPrefix)) {
    const std::string_view digits = metadata.substr(kMetadataPrefix.size());
    std::int64_t n = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
    // Digits only (from_chars takes a '-'), all of them, within int64.
    if (!digits.empty() && digits.front() != '-' && ec == std::errc() && end == digits.data() + digits.size()) {
      return AttemptLogStart{n, ""};
    }
  }
  std::string shown(metadata.substr(0, kMaxMetadataShown));
  for (char& c : shown) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
  }
  if (metadata.size() > kMaxMetadataShown) shown += "...";
  return beginning("the commit's metadata \"" + shown + "\" is not pillbox-attempts@N (another client committed?)");
}

}  // namespace pillbox::broker
