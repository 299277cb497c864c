// The JSON forms of an outcome, byte for byte: `run --json` lines and
// quarantine records (list --json, the hooks' stdin) are read by scripts, so
// their key names, null rules and order must not drift.
#include <signal.h>

#include <doctest/doctest.h>

#include <string>

#include "supervisor/cli/run_output.h"
#include "supervisor/store/quarantine_json.h"

namespace pillbox {
namespace {

TEST_CASE("outcome_json: a crash, byte for byte") {
  Outcome o;
  o.kind = Kind::kCrash;
  o.signal = SIGSEGV;
  o.fingerprint = "pb1-0123456789abcdef";
  o.crash_state = {"parse_header", "main"};
  o.message = "killed by SIGSEGV";
  o.cpu_ms = 35;
  o.wall_ms = 40;
  o.max_rss_kb = 4096;
  CHECK(outcome_json(Task{"poison", "", 1}, o, nullptr) ==
        R"({"cpu_ms":35,"crash_state":["parse_header","main"],"exit_code":null,"fingerprint":"pb1-0123456789abcdef",)"
        R"("key":"poison","kind":"crash","max_rss_kb":4096,"message":"killed by SIGSEGV","signal":"SIGSEGV",)"
        R"("status":"failed","syscall":null,"wall_ms":40})");
}

TEST_CASE("outcome_json: ok, byte for byte (no fingerprint: null)") {
  Outcome o;
  o.exit_code = 0;
  o.output = "fine";
  o.wall_ms = 12;
  CHECK(outcome_json(Task{"k", "", 1}, o, nullptr) ==
        R"({"cpu_ms":0,"crash_state":[],"exit_code":0,"fingerprint":null,"key":"k","kind":"ok","max_rss_kb":0,)"
        R"("message":"","output":"fine","signal":null,"status":"ok","syscall":null,"wall_ms":12})");
}

store::QuarantineRecord seccomp_record() {
  store::QuarantineRecord r;
  r.id = 7;
  r.status = store::RecordStatus::kQuarantined;
  r.repeats = 2;
  r.created_at = 1'700'000'000'123;
  r.updated_at = 1'700'000'001'456;
  store::QuarantineEntry& e = r.entry;
  e.key = "net";
  e.source = "run";
  e.handler = "exec";
  e.handler_identity = "exec:abc";
  e.handler_args = "{}";
  e.exec_argv = R"(["/bin/true"])";
  e.policy_identity = "pol:1";
  e.payload_sha256 = "ff00";
  e.payload_size = 3;
  e.kind = "seccomp-violation";
  e.fingerprint = "pb1-feed";
  e.crash_state = {};
  e.message = "denied socket";
  e.syscall = "socket";
  e.signal = SIGSYS;
  e.cpu_ms = 1;
  e.wall_ms = 2;
  e.max_rss_kb = 3;
  return r;
}

TEST_CASE("quarantine_record_json: a record, byte for byte") {
  CHECK(quarantine_record_json(seccomp_record(), 0, false, "") ==
        R"({"cpu_ms":1,"crash_state":[],"created_at":"2023-11-14T22:13:20.123Z","exec_argv":["/bin/true"],)"
        R"("exit_code":null,"fingerprint":"pb1-feed","handler":"exec","handler_args":{},)"
        R"("handler_identity":"exec:abc","id":7,"key":"net","kind":"seccomp-violation","max_rss_kb":3,)"
        R"("message":"denied socket","new_fingerprint":false,"payload_sha256":"ff00","payload_size":3,)"
        R"("policy_identity":"pol:1","repeats":2,"signal":"SIGSYS","source":"run","status":"quarantined",)"
        R"("syscall":"socket","updated_at":"2023-11-14T22:13:21.456Z","wall_ms":2})");
}

TEST_CASE("quarantine_record_json: text that is not JSON stays a string; an exit code is a number") {
  store::QuarantineRecord r = seccomp_record();
  r.entry.handler_args = "not json";
  r.entry.signal = 0;
  r.entry.syscall = "";
  r.entry.exit_code = 3;
  const std::string j = quarantine_record_json(r, 2, true, "/s");
  CHECK(j.find(R"("handler_args":"not json")") != std::string::npos);
  CHECK(j.find(R"("signal":null,)") != std::string::npos);
  CHECK(j.find(R"("syscall":null,)") != std::string::npos);
  CHECK(j.find(R"("exit_code":3,)") != std::string::npos);
  CHECK(j.find(R"("attempts":2,)") != std::string::npos);
  CHECK(j.find(R"("new_fingerprint":true,)") != std::string::npos);
  CHECK(j.find(R"("store":"/s")") != std::string::npos);
}

}  // namespace
}  // namespace pillbox
