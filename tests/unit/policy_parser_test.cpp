// The policy format: parsing, every error class, units, OCI import, the
// shipped policies, round-trips and robustness against arbitrary bytes.
#include "shared/policy_parser.h"

#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <random>

#include "shared/embedded_policies.h"
#include "shared/oci_import.h"
#include "tests/unit/scratch_dir.h"

namespace pillbox {
namespace {

Expected<Policy> parse(std::string_view text) { return parse_policy(text, "t.policy", ""); }

// The error of text that must not parse; fails the test if it does.
std::string error_of(std::string_view text) {
  Expected<Policy> p = parse(text);
  REQUIRE_FALSE(p.has_value());
  CHECK(p.error().find('\n') == std::string::npos);
  return p.error();
}

bool starts_with(const std::string& s, std::string_view prefix) { return s.starts_with(prefix); }
bool contains(const std::string& s, std::string_view part) {
  return s.find(part) != std::string::npos;
}

// All fields but the origin, which names where a policy came from.
void check_same(const Policy& a, const Policy& b) {
  CHECK(a.name == b.name);
  CHECK(a.allow_unsafe == b.allow_unsafe);
  CHECK(a.limits.cpu_ms == b.limits.cpu_ms);
  CHECK(a.limits.wall_ms == b.limits.wall_ms);
  CHECK(a.limits.memory_bytes == b.limits.memory_bytes);
  CHECK(a.limits.file_size_bytes == b.limits.file_size_bytes);
  CHECK(a.limits.open_files == b.limits.open_files);
  CHECK(a.limits.processes == b.limits.processes);
  CHECK(a.limits.stack_bytes == b.limits.stack_bytes);
  CHECK(a.limits.output_bytes == b.limits.output_bytes);
  CHECK(a.isolation.network == b.isolation.network);
  CHECK(a.isolation.user == b.isolation.user);
  CHECK(a.isolation.cgroup == b.isolation.cgroup);
  CHECK(a.isolation.filesystem == b.isolation.filesystem);
  CHECK(a.seccomp.enabled == b.seccomp.enabled);
  CHECK(a.seccomp.default_action == b.seccomp.default_action);
  CHECK(a.seccomp.allow == b.seccomp.allow);
}

void check_round_trip(const Policy& p) {
  Expected<Policy> again = parse_policy(format_policy(p), "formatted", "");
  REQUIRE_MESSAGE(again.has_value(), again.error());
  check_same(p, *again);
}

constexpr std::string_view kFullPolicy =
    "# a complete policy\n"
    "[policy]\n"
    "name = full-test\n"
    "\n"
    "[limits]\n"
    "cpu = 3s            # trailing comment\n"
    "wall = 2m\n"
    "memory = 256MiB\n"
    "file_size = 0\n"
    "open_files = 32\n"
    "processes = 8\n"
    "stack = 1M\n"
    "output = 4096\n"
    "[isolation]\n"
    "network = on\n"
    "user = 1234\n"
    "cgroup = required\n"
    "filesystem = host\n"
    "[seccomp]\n"
    "enabled = yes\n"
    "default = errno\n"
    "allow = write read close\n"
    "allow = read mmap   # repeats are merged\n";

// Docker-style profile exercising every import rule (arch-neutral names).
constexpr std::string_view kDockerStyleProfile = R"({
  "defaultAction": "SCMP_ACT_ERRNO",
  "defaultErrnoRet": 1,
  "archMap": [{"architecture": "SCMP_ARCH_X86_64", "subArchitectures": ["SCMP_ARCH_X86"]}],
  "syscalls": [
    {"names": ["read", "write", "socketcall", "not_a_syscall"], "action": "SCMP_ACT_ALLOW", "args": []},
    {"names": ["personality"], "action": "SCMP_ACT_ALLOW",
     "args": [{"index": 0, "value": 0, "op": "SCMP_CMP_EQ"}]},
    {"names": ["sync_file_range"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["s390", "s390x"]}},
    {"names": ["getppid"], "action": "SCMP_ACT_ALLOW", "includes": {"arches": ["amd64", "arm64"]}},
    {"names": ["getpid"], "action": "SCMP_ACT_ALLOW", "excludes": {"arches": ["amd64", "arm64"]}},
    {"names": ["mount"], "action": "SCMP_ACT_ALLOW", "includes": {"caps": ["CAP_SYS_ADMIN"]}},
    {"names": ["uname"], "action": "SCMP_ACT_ALLOW", "excludes": {"caps": ["CAP_SYS_ADMIN"]}},
    {"names": ["ptrace"], "action": "SCMP_ACT_ALLOW", "includes": {"minKernel": "4.8"}},
    {"names": ["kill"], "action": "SCMP_ACT_ERRNO"},
    {"name": "close", "action": "SCMP_ACT_ALLOW"}
  ]
})";

const std::vector<std::string> kDockerStyleAllowed = {"close",  "getppid", "ptrace",
                                                      "read",   "uname",   "write"};

}  // namespace

TEST_CASE("a complete policy parses into every field") {
  Expected<Policy> p = parse(kFullPolicy);
  REQUIRE_MESSAGE(p.has_value(), p.error());
  CHECK(p->name == "full-test");
  CHECK(p->origin == "t.policy");
  CHECK(p->limits.cpu_ms == 3'000);
  CHECK(p->limits.wall_ms == 120'000);
  CHECK(p->limits.memory_bytes == 256ull << 20);
  CHECK(p->limits.file_size_bytes == 0);
  CHECK(p->limits.open_files == 32);
  CHECK(p->limits.processes == 8);
  CHECK(p->limits.stack_bytes == 1ull << 20);
  CHECK(p->limits.output_bytes == 4096);
  CHECK(p->isolation.network);
  CHECK(p->isolation.user == "1234");
  CHECK(p->isolation.cgroup == CgroupMode::kRequired);
  CHECK(p->isolation.filesystem == FilesystemMode::kHost);
  CHECK(p->seccomp.enabled);
  CHECK(p->seccomp.default_action == SeccompDefault::kErrno);
  CHECK(p->seccomp.allow == std::vector<std::string>{"close", "mmap", "read", "write"});
  check_round_trip(*p);
}

TEST_CASE("keys not given keep the model's defaults") {
  Expected<Policy> p = parse("[limits]\ncpu = 7s\n");
  REQUIRE_MESSAGE(p.has_value(), p.error());
  const Policy defaults;
  CHECK(p->limits.cpu_ms == 7'000);
  CHECK(p->limits.wall_ms == defaults.limits.wall_ms);
  CHECK(p->limits.memory_bytes == defaults.limits.memory_bytes);
  CHECK(p->isolation.user == defaults.isolation.user);
  CHECK(p->seccomp.default_action == defaults.seccomp.default_action);
  CHECK(p->seccomp.allow.empty());
}

TEST_CASE("the name defaults to the file's stem") {
  Expected<Policy> p = parse_policy("[limits]\n", "conf/my-parser.policy", "");
  REQUIRE(p.has_value());
  CHECK(p->name == "my-parser");
  Expected<Policy> unnamed = parse_policy("", "builtin:x", "");
  REQUIRE(unnamed.has_value());
  CHECK(unnamed->name == Policy{}.name);
}

TEST_CASE("formatting round-trips unusual values") {
  Policy p;
  p.name = "odd";
  p.limits.cpu_ms = 1'500;
  p.limits.wall_ms = 3'600'000;
  p.limits.memory_bytes = (1ull << 30) + 1;
  p.limits.stack_bytes = (3ull << 20) + 7;
  p.limits.output_bytes = 1;
  p.isolation.cgroup = CgroupMode::kOff;
  p.seccomp.enabled = false;
  p.allow_unsafe = true;  // seccomp off must be meant
  p.seccomp.default_action = SeccompDefault::kKill;
  for (int i = 0; i < 40; ++i) p.seccomp.allow.push_back(i % 2 ? "read" : "write");
  p.seccomp.allow.push_back("clock_nanosleep");
  Expected<Policy> again = parse_policy(format_policy(p), "formatted", "");
  REQUIRE_MESSAGE(again.has_value(), again.error());
  CHECK(again->seccomp.allow == std::vector<std::string>{"clock_nanosleep", "read", "write"});
  again->seccomp.allow = p.seccomp.allow;  // the input list was unsorted, with repeats
  check_same(p, *again);
}

TEST_CASE("CRLF, a missing final newline, a BOM and blank lines are fine") {
  Expected<Policy> p = parse("\xEF\xBB\xBF[limits]\r\n\r\n  cpu=2s\r\n\twall = 4s");
  REQUIRE_MESSAGE(p.has_value(), p.error());
  CHECK(p->limits.cpu_ms == 2'000);
  CHECK(p->limits.wall_ms == 4'000);
}

TEST_CASE("units of durations and sizes") {
  Limits l;
  auto set = [&l](std::string_view key, std::string_view value) {
    Status st = set_limit(l, key, value);
    REQUIRE_MESSAGE(st.is_ok(), st.message());
  };
  set("wall", "500ms");
  CHECK(l.wall_ms == 500);
  set("cpu", "2m");
  CHECK(l.cpu_ms == 120'000);
  set("cpu", "7");
  CHECK(l.cpu_ms == 7'000);
  set("wall", "1h");
  CHECK(l.wall_ms == 3'600'000);
  set("wall", "5 S");
  CHECK(l.wall_ms == 5'000);
  set("memory", "256MiB");
  CHECK(l.memory_bytes == 256ull << 20);
  set("memory", "1G");
  CHECK(l.memory_bytes == 1ull << 30);
  set("memory", "2gb");
  CHECK(l.memory_bytes == 2ull << 30);
  set("stack", "64k");
  CHECK(l.stack_bytes == 64ull << 10);
  set("output", "100");
  CHECK(l.output_bytes == 100);
  set("output", "100B");
  CHECK(l.output_bytes == 100);
  set("file_size", "1T");
  CHECK(l.file_size_bytes == 1ull << 40);
}

TEST_CASE("set_limit, the CLI's way in, checks like the file parser") {
  Limits l;
  Status st = set_limit(l, "cpu", "0");
  CHECK(st.message() == "cpu '0' is out of range; use 1s to 24h");
  st = set_limit(l, "cpus", "5s");
  CHECK(starts_with(st.message(), "unknown limit 'cpus' (known: cpu, wall, memory,"));
  st = set_limit(l, "memory", "lots");
  CHECK(starts_with(st.message(), "bad size 'lots' for memory; write a whole number"));
  CHECK(l.cpu_ms == Limits{}.cpu_ms);  // failed calls change nothing
}

TEST_CASE("structural errors name the line") {
  CHECK(error_of("cpu = 5s\n") ==
        "t.policy:1: 'cpu = 5s' is outside any section; put it under a header such as [limits]");
  CHECK(error_of("# c\n\n[limit]\n") ==
        "t.policy:3: unknown section [limit] (known: [policy], [limits], [isolation], "
        "[seccomp]); did you mean 'limits'?");
  CHECK(error_of("[limits\n") == "t.policy:1: malformed section header '[limits'; write it as [limits]");
  CHECK(error_of("[limits]\n[policy]\n[limits]\n") ==
        "t.policy:3: section [limits] appears twice (first at line 1); put all its keys under one header");
  CHECK(error_of("[limits]\ncpus = 5s\n") ==
        "t.policy:2: unknown key 'cpus' in [limits] (known: cpu, wall, memory, file_size, "
        "open_files, processes, stack, output); did you mean 'cpu'?");
  CHECK(error_of("[limits]\n\ncpu 5s\n") == "t.policy:3: missing '=' in 'cpu 5s'; write 'key = value'");
  CHECK(error_of("[limits]\n = 5s\n") == "t.policy:2: missing key before '='; write 'key = value'");
  CHECK(error_of("[limits]\ncpu =   # nothing\n") ==
        "t.policy:2: empty value for 'cpu'; give a value or delete the line");
  CHECK(error_of("[limits]\ncpu = 5s\nwall = 9s\ncpu = 6s\n") ==
        "t.policy:4: duplicate key 'cpu' in [limits] (first at line 2); keep one of them");
  CHECK(error_of("[policy]\nname = a b\n") ==
        "t.policy:2: invalid policy name 'a b'; use 1-64 letters, digits, '.', '_' or '-'");
}

TEST_CASE("bad values name the line and the accepted forms") {
  CHECK(error_of("[limits]\ncpu = 5x\n") ==
        "t.policy:2: bad duration '5x' for cpu; write a whole number with a unit: 500ms, 5s, 2m, "
        "1h or 7d (a bare number means seconds)");
  CHECK(error_of("[limits]\ncpu = 1.5s\n") ==
        "t.policy:2: bad duration '1.5s' for cpu; write a whole number with a unit: 500ms, 5s, 2m, "
        "1h or 7d (a bare number means seconds)");
  CHECK(starts_with(error_of("[limits]\nmemory = 12Q\n"),
                    "t.policy:2: bad size '12Q' for memory; write a whole number with an optional "
                    "unit: 4096 (bytes), 64K, 256M, 1G, 256MiB"));
  CHECK(error_of("[limits]\nopen_files = 64k\n") ==
        "t.policy:2: bad number '64k' for open_files; write a whole number such as 64");
  CHECK(error_of("[limits]\ncpu = -1s\n") ==
        "t.policy:2: bad duration '-1s' for cpu; write a whole number with a unit: 500ms, 5s, 2m, "
        "1h or 7d (a bare number means seconds)");
}

TEST_CASE("values out of range name the line and the range") {
  CHECK(error_of("[limits]\ncpu = 500ms\n") == "t.policy:2: cpu '500ms' is out of range; use 1s to 24h");
  CHECK(error_of("[limits]\ncpu = 25h\n") == "t.policy:2: cpu '25h' is out of range; use 1s to 24h");
  CHECK(error_of("[limits]\nwall = 50ms\n") == "t.policy:2: wall '50ms' is out of range; use 100ms to 24h");
  CHECK(error_of("[limits]\nmemory = 512K\n") == "t.policy:2: memory '512K' is out of range; use 1M to 1T");
  CHECK(error_of("[limits]\nprocesses = 0\n") ==
        "t.policy:2: processes '0' is out of range; use 1 to 4194304");
  CHECK(error_of("[limits]\nopen_files = 3\n") ==
        "t.policy:2: open_files '3' is out of range; use 4 to 1048576");
  CHECK(error_of("[limits]\noutput = 0\n") == "t.policy:2: output '0' is out of range; use 1 to 1G");
  CHECK(error_of("[limits]\nmemory = 99999999999999999999G\n") ==
        "t.policy:2: memory '99999999999999999999G' is out of range; use 1M to 1T");
  CHECK(error_of("[limits]\nmemory = 17179869184T\n") ==
        "t.policy:2: memory '17179869184T' is out of range; use 1M to 1T");
}

TEST_CASE("unknown enum values list the choices") {
  CHECK(error_of("[isolation]\ncgroup = maybe\n") ==
        "t.policy:2: unknown value 'maybe' for cgroup (choices: auto, required, off)");
  CHECK(error_of("[isolation]\nnetwork = yes\n") ==
        "t.policy:2: unknown value 'yes' for network (choices: on, off)");
  CHECK(error_of("[isolation]\nfilesystem = ro\n") ==
        "t.policy:2: unknown value 'ro' for filesystem (choices: read-only, host)");
  CHECK(error_of("[seccomp]\nenabled = on\n") ==
        "t.policy:2: unknown value 'on' for enabled (choices: yes, no)");
  CHECK(error_of("[seccomp]\ndefault = allow\n") ==
        "t.policy:2: unknown value 'allow' for default (choices: trap, kill, errno)");
  CHECK(error_of("[isolation]\nuser = -rf\n") ==
        "t.policy:2: invalid user '-rf'; give a user name (letters, digits, '.', '_', '-') or a "
        "numeric uid");
  CHECK(error_of("[isolation]\nuser = 4294967295\n") ==
        "t.policy:2: invalid user '4294967295'; give a user name (letters, digits, '.', '_', '-') "
        "or a numeric uid");
  Expected<Policy> p = parse("[isolation]\ncgroup = OFF\nnetwork = Off\n");
  REQUIRE(p.has_value());
  CHECK(p->isolation.cgroup == CgroupMode::kOff);
}

TEST_CASE("unknown syscalls are errors, with the nearest known name") {
  CHECK(error_of("[seccomp]\nallow = read\nallow = write sokcet close\n") ==
        "t.policy:3: unknown syscall 'sokcet'; did you mean 'socket'?");
  CHECK(error_of("[seccomp]\nallow = mmapp\n") == "t.policy:2: unknown syscall 'mmapp'; did you mean 'mmap'?");
  CHECK(error_of("[seccomp]\nallow = qqqqqqqqqq\n") ==
        "t.policy:2: unknown syscall 'qqqqqqqqqq'; use the kernel's names as in `man 2 syscalls` "
        "(e.g. pread64, newfstatat)");
  // libseccomp knows socketcall, but only for 32-bit x86 and others.
  CHECK(error_of("[seccomp]\nallow = socketcall\n") ==
        "t.policy:2: syscall 'socketcall' does not exist on this architecture; remove it");
}

TEST_CASE("allow lines accumulate, sorted and without repeats") {
  Expected<Policy> p = parse("[seccomp]\nallow = write, read\n[limits]\n[seccomp]\n");
  CHECK_FALSE(p.has_value());  // a section may not reopen...
  p = parse("[seccomp]\nallow = write, read\nallow=read\tfutex\nallow = write\n");
  REQUIRE_MESSAGE(p.has_value(), p.error());  // ...but allow may repeat
  CHECK(p->seccomp.allow == std::vector<std::string>{"futex", "read", "write"});
}

TEST_CASE("text that is not a policy is refused with the line") {
  CHECK(error_of(std::string_view("[limits]\ncpu = 5s\0\n", 18)) ==
        "t.policy:2: control character 0x00 at column 9; policy files are plain text");
  CHECK(error_of("[limits]\n\x1b[31m\n") ==
        "t.policy:2: control character 0x1b at column 1; policy files are plain text");
  CHECK(error_of("[limits]\rcpu = 5s\n") ==
        "t.policy:1: control character 0x0d at column 9; policy files are plain text");
  const std::string long_line = "[limits]\n# " + std::string(70'000, 'x') + "\n";
  CHECK(error_of(long_line) == "t.policy:2: line is longer than 65536 bytes; split it");
  const std::string huge = "[limits]\n" + std::string(2'000'000, '\n');
  CHECK(error_of(huge) ==
        "t.policy: policy is 2000009 bytes, more than the 1048576 byte limit; is it the right file?");
}

TEST_CASE("long values are shortened in messages") {
  const std::string err = error_of("[isolation]\ncgroup = " + std::string(5'000, 'z') + "\n");
  CHECK(err.size() < 200);
  CHECK(contains(err, "zzz...'"));
}

TEST_CASE("OCI import: only unconditional allows for this architecture") {
  Expected<std::vector<std::string>> names = import_oci_seccomp(kDockerStyleProfile, "p.json");
  REQUIRE_MESSAGE(names.has_value(), names.error());
  CHECK(*names == kDockerStyleAllowed);
}

TEST_CASE("OCI import: a runtime config.json carries the profile in linux.seccomp") {
  const std::string config = R"({"ociVersion": "1.0.2", "linux": {"seccomp": )" +
                             std::string(kDockerStyleProfile) + "}}";
  Expected<std::vector<std::string>> names = import_oci_seccomp(config, "config.json");
  REQUIRE_MESSAGE(names.has_value(), names.error());
  CHECK(*names == kDockerStyleAllowed);
  CHECK(import_oci_seccomp(R"({"linux": {"seccomp": {"syscalls": []}}})", "c.json").error() ==
        "c.json: linux.seccomp.defaultAction is missing");
}

TEST_CASE("OCI import errors") {
  CHECK(import_oci_seccomp(R"({"defaultAction": "SCMP_ACT_ALLOW", "syscalls": []})", "deny.json")
            .error() ==
        "deny.json: defaultAction SCMP_ACT_ALLOW makes this a denylist profile; denylist profiles "
        "cannot be imported, pillbox needs an allowlist");
  const std::string malformed =
      import_oci_seccomp("{\"defaultAction\": \"SCMP_ACT_ERRNO\",\n \"syscalls\": [", "bad.json").error();
  CHECK(starts_with(malformed, "bad.json: malformed JSON at byte 51: parse error at line 2"));
  CHECK(malformed.find('\n') == std::string::npos);
  CHECK(import_oci_seccomp(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": "read", "action": "SCMP_ACT_ALLOW"}]})",
                           "t.json")
            .error() == "t.json: syscalls[0].names must be an array of strings");
  CHECK(import_oci_seccomp(R"({"defaultAction": "SCMP_ACT_ERRNO", "syscalls": [{"names": ["read"]}]})", "t.json")
            .error() == "t.json: syscalls[0].action must be a string such as \"SCMP_ACT_ALLOW\"");
  CHECK(import_oci_seccomp("[1, 2]", "t.json").error() ==
        "t.json: top level must be a JSON object (a seccomp profile)");
  CHECK(import_oci_seccomp("{}", "t.json").error() ==
        "t.json: no 'defaultAction' and no 'linux.seccomp'; is this a seccomp profile?");
}

TEST_CASE("import_oci in a policy: relative to the policy file, errors on the policy line") {
  test::ScratchDir dir{"policy-test"};
  dir.write("profile.json", kDockerStyleProfile);
  dir.write("broken.json", "{\"defaultAction\": ");
  const std::string policy_path =
      dir.write("p.policy", "[seccomp]\nallow = futex\nimport_oci = profile.json\n");
  Expected<Policy> p = load_policy_file(policy_path);
  REQUIRE_MESSAGE(p.has_value(), p.error());
  std::vector<std::string> expected = kDockerStyleAllowed;
  expected.push_back("futex");
  std::sort(expected.begin(), expected.end());
  CHECK(p->seccomp.allow == expected);
  CHECK(p->name == "p");
  check_round_trip(*p);  // the imported names are written out, not the import

  Expected<Policy> missing = parse_policy("[seccomp]\n\nimport_oci = nope.json\n", "m.policy", dir.path);
  REQUIRE_FALSE(missing.has_value());
  CHECK(missing.error() == "m.policy:3: import_oci: cannot read seccomp profile '" + dir.path +
                               "/nope.json': No such file or directory");
  Expected<Policy> broken = parse_policy("[seccomp]\nimport_oci = broken.json\n", "b.policy", dir.path);
  REQUIRE_FALSE(broken.has_value());
  CHECK(starts_with(broken.error(),
                    "b.policy:2: import_oci: " + dir.path + "/broken.json: malformed JSON at byte"));
}

TEST_CASE("unreadable policy files are named with the reason") {
  CHECK(load_policy_file("/nonexistent/x.policy").error() ==
        "cannot read policy file '/nonexistent/x.policy': No such file or directory");
  test::ScratchDir dir{"policy-test"};
  CHECK(load_policy_file(dir.path).error() ==
        "cannot read policy file '" + dir.path + "': not a regular file");
}

TEST_CASE("the shipped policies parse and keep their promises") {
  Expected<Policy> strict = load_policy_file(PILLBOX_SOURCE_DIR "/policies/strict.policy");
  REQUIRE_MESSAGE(strict.has_value(), strict.error());
  CHECK(strict->name == "strict");
  CHECK(strict->limits.cpu_ms == 5'000);
  CHECK(strict->limits.processes == 16);
  CHECK(strict->isolation.filesystem == FilesystemMode::kReadOnly);
  CHECK_FALSE(strict->isolation.network);
  CHECK(strict->seccomp.default_action == SeccompDefault::kTrap);
  const auto& sa = strict->seccomp.allow;
  for (const char* denied : {"socket", "connect", "execve", "fork", "clone", "ioctl", "write"}) {
    CHECK_MESSAGE(std::find(sa.begin(), sa.end(), denied) == sa.end(), denied);
  }
  CHECK(std::find(sa.begin(), sa.end(), "openat") != sa.end());
  check_round_trip(*strict);

  Expected<Policy> exec = load_policy_file(PILLBOX_SOURCE_DIR "/policies/exec.policy");
  REQUIRE_MESSAGE(exec.has_value(), exec.error());
  CHECK(exec->name == "exec");
  CHECK(exec->limits.memory_bytes == 1ull << 30);
  CHECK(exec->isolation.filesystem == FilesystemMode::kReadOnly);
  CHECK(exec->isolation.tmp_bytes == 64ull << 20);
  CHECK(exec->isolation.writable.empty());
  CHECK(strict->isolation.tmp_bytes == 0);
  const auto& ea = exec->seccomp.allow;
  for (const char* allowed : {"execve", "clone", "wait4", "pipe2", "write", "openat"}) {
    CHECK_MESSAGE(std::find(ea.begin(), ea.end(), allowed) != ea.end(), allowed);
  }
  for (const char* denied : {"socket", "connect", "bind", "ptrace", "mount", "bpf", "kexec_load",
                             "perf_event_open", "keyctl", "add_key", "init_module"}) {
    CHECK_MESSAGE(std::find(ea.begin(), ea.end(), denied) == ea.end(), denied);
  }
  check_round_trip(*exec);
}

TEST_CASE("resolve_policy: shipped names and paths") {
  Expected<Policy> builtin = resolve_policy("strict");
  REQUIRE_MESSAGE(builtin.has_value(), builtin.error());
  CHECK(builtin->origin == "builtin:strict");
  Expected<Policy> file = resolve_policy(PILLBOX_SOURCE_DIR "/policies/strict.policy");
  REQUIRE(file.has_value());
  CHECK(policy_identity(*builtin) == policy_identity(*file));

  const std::string unknown = resolve_policy("strct").error();
  CHECK(starts_with(unknown, "unknown policy 'strct'; did you mean 'strict'? (shipped: "));
  CHECK(contains(unknown, "strict"));
  CHECK(contains(unknown, "exec"));
  CHECK(contains(unknown, "give a path containing '/' or ending in .policy)"));
  CHECK(resolve_policy("missing.policy").error() ==
        "cannot read policy file 'missing.policy': No such file or directory");
}

TEST_CASE("policy identity: name plus a hash of what confines the child") {
  Policy a;
  a.name = "p";
  a.seccomp.allow = {"read", "write"};
  const std::string id = policy_identity(a);
  REQUIRE(id.size() == 2 + 12);
  CHECK(starts_with(id, "p@"));
  CHECK(id.find_first_not_of("0123456789abcdef", 2) == std::string::npos);

  Policy reordered = a;
  reordered.seccomp.allow = {"write", "read", "read"};
  reordered.origin = "elsewhere";
  CHECK(policy_identity(reordered) == id);

  Policy tighter = a;
  tighter.limits.cpu_ms = 1'000;
  CHECK(policy_identity(tighter) != id);
  Policy host_fs = a;
  host_fs.isolation.filesystem = FilesystemMode::kHost;
  CHECK(policy_identity(host_fs) != id);
  // What tasks may see or write of the host is part of what confines them.
  Policy sharing = a;
  sharing.isolation.shared = {"/tmp/tools"};
  CHECK(policy_identity(sharing) != id);
  Policy writing = a;
  writing.isolation.writable = {"/tmp/tools"};
  CHECK(policy_identity(writing) != id);
  CHECK(policy_identity(writing) != policy_identity(sharing));
}

TEST_CASE("share lines: absolute host paths, once each, written back by the policy's text") {
  auto p = parse_policy("[isolation]\nshare = /tmp/tools /srv/data/\nshare = /tmp/tools\n", "t", "");
  REQUIRE(p.has_value());
  CHECK(p->isolation.shared == std::vector<std::string>{"/tmp/tools", "/srv/data"});
  auto again = parse_policy(format_policy(*p), "t", "");
  REQUIRE(again.has_value());
  CHECK(again->isolation.shared == p->isolation.shared);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"share = tmp/x", "is not absolute"}, {"share = /tmp/../etc", "'..' component"}, {"share = /", "name a directory"}}) {
    const std::string& policy_text = text;  // clang 14 cannot capture a structured binding
    CAPTURE(policy_text);
    auto bad = parse_policy("[isolation]\n" + text + "\n", "t", "");
    REQUIRE_FALSE(bad.has_value());
    CHECK(bad.error().find(says) != std::string::npos);
    CHECK(bad.error().find("t:2: ") != std::string::npos);
  }
}

TEST_CASE("unsafe settings are refused at their line unless allow_unsafe = yes") {
  const std::string root = error_of("[policy]\nname = p\n[isolation]\nnetwork = off\nuser = root\n");
  CHECK(starts_with(root, "t.policy:5: unsafe setting user = root: tasks (or, with a uid_pool, a plugin's load check) run as root"));
  CHECK(contains(root, "add 'allow_unsafe = yes' under [policy]"));
  CHECK(starts_with(error_of("[isolation]\nuser = 000\n"), "t.policy:2: unsafe setting user = 000"));
  const std::string off = error_of("[seccomp]\ndefault = trap\nenabled = no\n");
  CHECK(starts_with(off, "t.policy:3: unsafe setting seccomp enabled = no"));
  // A user named like root is only root when it is "root" or all zeros.
  CHECK(parse("[isolation]\nuser = rooter\n").has_value());
  CHECK(parse("[isolation]\nuser = 10\n").has_value());
  // A uid pool does not make root safe: the plugin load check runs as `user`.
  CHECK(starts_with(error_of("[isolation]\nuser = root\nuid_pool = 3000000-3000009\n"), "t.policy:2: unsafe"));

  // Saying so makes them parse, in either order, and survive a round trip.
  Expected<Policy> meant = parse("[isolation]\nuser = 0\n[seccomp]\nenabled = no\n[policy]\nallow_unsafe = yes\n");
  REQUIRE_MESSAGE(meant.has_value(), meant.error());
  CHECK(meant->allow_unsafe);
  CHECK(unsafe_settings(*meant).size() == 2);
  Expected<Policy> again = parse_policy(format_policy(*meant), "formatted", "");
  REQUIRE_MESSAGE(again.has_value(), again.error());
  CHECK(again->allow_unsafe);
  check_same(*meant, *again);
  // allow_unsafe = no is the default and changes nothing.
  CHECK(starts_with(error_of("[policy]\nallow_unsafe = no\n[isolation]\nuser = root\n"), "t.policy:4: unsafe"));
  // It permits; it does not confine: the identity ignores it.
  Policy a;
  Policy b = a;
  b.allow_unsafe = true;
  CHECK(policy_identity(a) == policy_identity(b));
  CHECK(unsafe_settings(a).empty());
}

TEST_CASE("only the two policies documented are shipped") {
  std::vector<std::string> names;
  for (const EmbeddedPolicy& p : embedded_policies()) names.emplace_back(p.name);
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"exec", "strict"});
  for (const std::string& n : names) {
    Expected<Policy> p = resolve_policy(n);
    REQUIRE_MESSAGE(p.has_value(), p.error());
    CHECK_MESSAGE(unsafe_settings(*p).empty(), n);
    CHECK_FALSE(p->allow_unsafe);
  }
}

TEST_CASE("to_string spellings are the format's") {
  CHECK(to_string(SeccompDefault::kTrap) == "trap");
  CHECK(to_string(SeccompDefault::kKill) == "kill");
  CHECK(to_string(SeccompDefault::kErrno) == "errno");
  CHECK(to_string(CgroupMode::kAuto) == "auto");
  CHECK(to_string(CgroupMode::kRequired) == "required");
  CHECK(to_string(CgroupMode::kOff) == "off");
  CHECK(to_string(FilesystemMode::kHost) == "host");
  CHECK(to_string(FilesystemMode::kReadOnly) == "read-only");
}

TEST_CASE("arbitrary bytes never crash or hang the parser") {
  std::mt19937_64 rng(20240611);  // fixed seed: failures reproduce
  // Half the inputs are raw bytes; half are spliced from format fragments so
  // the soup reaches value parsing, not just the first-line errors.
  const std::vector<std::string> fragments = {
      "[policy]", "[limits]", "[isolation]", "[seccomp]", "[", "]", "\n", "\r\n", "=", " ", "#",
      "cpu", "wall", "memory", "processes", "open_files", "output", "name", "user", "cgroup",
      "allow", "default", "enabled", "network", "filesystem", "import_oci", "5s", "500ms", "2m",
      "256MiB", "1G", "0", "99999999999999999999999", "read", "write", "sokcet", ",", "\t",
      std::string(1, '\0'), "\xff\xfe", "auto", "off", "yes", "trap", "nobody", "read-only"};
  for (int i = 0; i < 4000; ++i) {
    std::string input;
    const std::size_t pieces = rng() % 64;
    for (std::size_t k = 0; k < pieces; ++k) {
      if (i % 2 == 0) {
        input.push_back(static_cast<char>(rng() & 0xff));
      } else {
        input += fragments[rng() % fragments.size()];
      }
    }
    Expected<Policy> p = parse_policy(input, "soup.policy", "/nonexistent");
    if (!p.has_value()) {
      CHECK(starts_with(p.error(), "soup.policy"));
      CHECK(p.error().find('\n') == std::string::npos);
    }
  }
}

}  // namespace pillbox
