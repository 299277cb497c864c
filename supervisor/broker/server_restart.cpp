#include "supervisor/broker/server_restart.h"

#include <algorithm>

namespace pillbox::broker {

void WrittenEntries::add(const std::string& id) {
  const auto parsed = stream_id(id);
  if (!parsed) return;  // none written ("" with --no-results)
  ++total_;
  ids_.push_back(*parsed);
  if (ids_.size() > keep_) ids_.pop_front();
}

std::size_t WrittenEntries::beyond(const std::string& last) const {
  if (last.empty()) return ids_.size();
  const auto end = stream_id(last);
  if (!end) return 0;  // Redis said something else: claim no loss
  // Ids a worker adds only grow: the lost ones are a tail.
  return static_cast<std::size_t>(ids_.end() - std::upper_bound(ids_.begin(), ids_.end(), *end));
}

RestartLosses restart_losses(const ServerState& now, const WrittenEntries& results,
                             const WrittenEntries& dead_letters, std::size_t held_gone) {
  return {.results_lost = results.beyond(now.results_last), .results_written = results.total(),
          .results_complete = results.complete(), .dead_letters_lost = dead_letters.beyond(now.dlq_last),
          .dead_letters_written = dead_letters.total(), .dead_letters_complete = dead_letters.complete(),
          .held_gone = held_gone, .stream_gone = !now.stream_exists, .group_gone = !now.group_exists};
}

namespace {

std::string count_of(std::size_t lost, bool complete, std::size_t written, const std::string& what) {
  return (complete ? "" : "at least ") + std::to_string(lost) + " of the " + std::to_string(written) + " " + what;
}

}  // namespace

std::string describe_restart(const std::string& where, const StreamKeys& keys, const std::string& group,
                             const RestartLosses& l) {
  const std::string head = "Redis at " + where + " restarted (a new run id)";
  if (!l.any()) return head + " with everything this worker wrote since it started";
  std::string parts;
  auto add = [&parts](const std::string& part) { parts += (parts.empty() ? "" : "; ") + part; };
  if (l.results_lost > 0) {
    add(count_of(l.results_lost, l.results_complete, l.results_written, "results this worker wrote to " + keys.results) +
        " are gone");
  }
  if (l.dead_letters_lost > 0) {
    add(count_of(l.dead_letters_lost, l.dead_letters_complete, l.dead_letters_written,
                 "dead letters (quarantine records) this worker wrote to " + keys.dlq) +
        " are gone");
  }
  if (l.held_gone > 0) {
    add(std::to_string(l.held_gone) +
        (l.held_gone == 1 ? " entry this worker held is gone: its outcome cannot" : " entries this worker held are gone: their outcomes cannot") +
        " be written");
  }
  if (l.stream_gone) {
    add("the stream '" + keys.stream + "' is gone, with every entry not yet run, and its consumer group '" + group +
        "'");
  } else if (l.group_gone) {
    add("the consumer group '" + group + "' is gone");
  }
  return head + " and lost data: " + parts;
}

}  // namespace pillbox::broker
