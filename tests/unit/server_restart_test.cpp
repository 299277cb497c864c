// What a worker says of a Redis that restarted (supervisor/broker/server_restart.h):
// the counts come from the ids it wrote and where the streams end now.
#include <doctest/doctest.h>

#include <string>

#include "supervisor/broker/server_restart.h"

using namespace pillbox::broker;

TEST_CASE("server restart: the ids a worker wrote beyond where a stream ends now are lost") {
  WrittenEntries w(4);
  CHECK(w.beyond("") == 0);
  w.add("");  // --no-results: nothing written
  CHECK(w.total() == 0);
  for (const char* id : {"100-0", "100-1", "101-0", "250-3"}) w.add(id);
  CHECK(w.total() == 4);
  CHECK(w.complete());
  CHECK(w.beyond("250-3") == 0);
  CHECK(w.beyond("101-0") == 1);
  CHECK(w.beyond("100-0") == 3);
  CHECK(w.beyond("99-9") == 4);
  CHECK(w.beyond("") == 4);        // the stream is gone
  CHECK(w.beyond("garbage") == 0);  // Redis said something else: no loss claimed
  w.add("300-0");                   // the oldest is forgotten: counts become "at least"
  CHECK(w.total() == 5);
  CHECK_FALSE(w.complete());
  CHECK(w.beyond("") == 4);
}

TEST_CASE("server restart: one line says what is gone, or that nothing is") {
  const StreamKeys keys = stream_keys("jobs");
  WrittenEntries results, dead;
  results.add("5-0");
  results.add("6-0");
  dead.add("7-0");
  ServerState kept;
  kept.run_id = "b";
  kept.stream_exists = kept.group_exists = true;
  kept.results_last = "6-0";
  kept.dlq_last = "7-0";
  RestartLosses none = restart_losses(kept, results, dead, 0);
  CHECK_FALSE(none.any());
  CHECK(describe_restart("redis://h:1/0", keys, "g", none) ==
        "Redis at redis://h:1/0 restarted (a new run id) with everything this worker wrote since it started");

  ServerState empty;
  empty.run_id = "c";
  const RestartLosses all = restart_losses(empty, results, dead, 1);
  CHECK(all.results_lost == 2);
  CHECK(all.dead_letters_lost == 1);
  CHECK(all.stream_gone);
  CHECK(all.group_gone);
  CHECK(describe_restart("redis://h:1/0", keys, "g", all) ==
        "Redis at redis://h:1/0 restarted (a new run id) and lost data: 2 of the 2 results this worker wrote to "
        "jobs:results are gone; 1 of the 1 dead letters (quarantine records) this worker wrote to jobs:dlq are gone; "
        "1 entry this worker held is gone: its outcome cannot be written; the stream 'jobs' is gone, with every "
        "entry not yet run, and its consumer group 'g'");

  ServerState no_group = kept;
  no_group.group_exists = false;
  no_group.results_last = "5-0";
  CHECK(describe_restart("redis://h:1/0", keys, "g", restart_losses(no_group, results, dead, 0)) ==
        "Redis at redis://h:1/0 restarted (a new run id) and lost data: 1 of the 2 results this worker wrote to "
        "jobs:results are gone; the consumer group 'g' is gone");
}
