#pragma once
// A Kafka client for the end-to-end tests' own reads and writes, beside the
// pillbox under test: every record of a topic read from its beginning to
// its end by a consumer that joins no group and commits nothing (what the
// test reads moves no offset a worker sees), and records produced as
// another client would (idempotent, acks=all, murmur2 like Java's).
// Each call fails the test when the cluster does not answer.
#include <cstdint>
#include <optional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace e2e {

struct KafkaRecord {
  std::optional<std::string> key;  // none: a null key
  std::optional<std::string> value;  // none: a null value (a tombstone)
  std::vector<std::pair<std::string, std::string>> headers;  // in order; a null header value reads as ""
  int32_t partition = -1;
  int64_t offset = -1;

  // The first header named `name`, none when it has none.
  std::optional<std::string> header(const std::string& name) const;
};

// Every record of `topic` (which must exist), partition by partition in
// offset order, from each partition's beginning to its end as it is when
// the call starts. Read committed: records of aborted transactions and
// transaction markers are not returned.
std::vector<KafkaRecord> read_topic(const std::string& bootstrap, const std::string& topic);

// The number of partitions of `topic`; 0 when the cluster has no such topic
// (asked without naming it: naming a missing topic creates it on the mock).
int topic_partitions(const std::string& bootstrap, const std::string& topic);

struct KafkaOutgoing {
  std::optional<std::string> key;
  std::optional<std::string> value;
  std::vector<std::pair<std::string, std::string>> headers;
  std::optional<int32_t> partition;  // none: the key's (murmur2)
};

// Produces `records` to `topic` in order and waits until each is
// acknowledged (all in-sync replicas); their (partition, offset).
std::vector<std::pair<int32_t, int64_t>> produce(const std::string& bootstrap, const std::string& topic,
                                                 const std::vector<KafkaOutgoing>& records);

// What consumer group `group` committed for each partition of `topic`
// (-1001: nothing), and each partition's end (its high watermark).
struct KafkaGroupProgress {
  std::map<int32_t, int64_t> committed;
  std::map<int32_t, int64_t> end;
};
KafkaGroupProgress group_progress(const std::string& bootstrap, const std::string& topic, const std::string& group);

// Checks that group `group` committed each partition of `topic` at its end.
void check_all_committed(const std::string& bootstrap, const std::string& topic, const std::string& group);

// Commits, as another client of group `group` would (it joins the group,
// waits for its share, commits and leaves), offset and commit metadata for
// each partition of `topic` given.
struct KafkaCommit {
  int64_t offset = 0;
  std::string metadata;  // "": none
};
void commit_offsets(const std::string& bootstrap, const std::string& topic, const std::string& group,
                    const std::map<int32_t, KafkaCommit>& offsets);

}  // namespace e2e
