#pragma once
// What a Kafka worker may commit for one partition of its topic: never past
// a record that is not settled (docs/distributed.md, Kafka: commits). The
// offset committed is the lowest offset read and not yet settled (or, when
// everything read is settled, the one after the last read), and the commit
// carries where the next owner must start reading the attempt log so that
// it learns of every record from there on: the lowest attempt-log offset of
// an entry about any record at or after the committed one. Pure.
//
// A record past the committed offset may be settled already (a retry held
// before it: its neighbours ran on). The next owner reads it again from
// Kafka, finds its `settled` entry in the window, and does not run it.
#include <cstdint>
#include <map>
#include <optional>

#include "supervisor/broker/kafka_attempts.h"

namespace pillbox::broker {

class KafkaCommitTracker {
 public:
  // The partition is this worker's from `committed` (the group's committed
  // offset: the first record it will read; -1 or less: none committed, the
  // topic's start).
  explicit KafkaCommitTracker(std::int64_t committed);

  // A record of the partition was read (in offset order, each once).
  void read(std::int64_t offset);
  // The record is settled (its settled entry written, or known from the
  // log): the commit may pass it.
  void settled(std::int64_t offset);

  struct Commit {
    std::int64_t offset = 0;      // the next record to read
    std::int64_t log_from = 0;    // the attempt log's window starts here
  };
  // What to commit now, the window's start as `attempts` (the partition's
  // attempt log as this worker knows it) places it
  // (attempt_log_commit_offset); nullopt when nothing moved since the last
  // commit() that returned one (or nothing was read yet).
  std::optional<Commit> commit(const PartitionAttempts& attempts);
  // The offset a commit would name now (for lag): -1 before anything is read.
  std::int64_t committable() const;
  // Settled records past the committable offset: the window a held record
  // keeps uncommitted.
  std::size_t settled_beyond() const;

 private:
  std::int64_t start_;              // where reading started: the first committable offset
  std::int64_t next_read_ = -1;     // after the last read record (-1: none read)
  std::map<std::int64_t, bool> open_;  // read records not yet passed by the commit -> settled
  std::optional<Commit> last_;
};

}  // namespace pillbox::broker
