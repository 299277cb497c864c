// supervisor/exec/host_view.h: what of the host an exec task sees, decided
// from the config and this host's file system.
#include "supervisor/exec/host_view.h"

#include <doctest/doctest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace pillbox;

namespace {

using Words = std::vector<std::string>;

ChildConfig exec_config(const Words& argv) {
  ChildConfig c;
  c.handler = "exec";
  c.exec_argv = argv;
  c.policy.isolation.filesystem = FilesystemMode::kReadOnly;
  c.policy.isolation.tmp_bytes = 64 << 20;
  return c;
}

// A directory of the host under /tmp, removed at the end of the scope.
struct HostTmp {
  std::string path;
  HostTmp() {
    char tmpl[] = "/tmp/pillbox-unit-view-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
    std::ofstream(path + "/data.txt") << "x";
  }
  ~HostTmp() { std::filesystem::remove_all(path); }
};

}  // namespace

TEST_CASE("absolute_words: arguments, options, and paths inside a shell string, quoted ones whole") {
  CHECK(absolute_words("/tmp/x") == Words{"/tmp/x"});
  CHECK(absolute_words("--config=/etc/x.conf") == Words{"/etc/x.conf"});
  CHECK(absolute_words("cd /tmp/tt && ./run > /tmp/out.txt") == Words{"/tmp/tt", "/tmp/out.txt"});
  CHECK(absolute_words("'/srv/my tools/run' {}") == Words{"/srv/my tools/run"});
  CHECK(absolute_words("cat \"/tmp/a b/c\"; echo") == Words{"/tmp/a b/c"});
  CHECK(absolute_words("a/b relative") == Words{});
  CHECK(absolute_words("'/unterminated quote") == Words{"/unterminated"});
}

TEST_CASE("private_dir_of: below /tmp, /var/tmp, /dev/shm, not the directories themselves") {
  CHECK(private_dir_of("/tmp/x") == "/tmp");
  CHECK(private_dir_of("/var/tmp/a/b") == "/var/tmp");
  CHECK(private_dir_of("/dev/shm/s") == "/dev/shm");
  CHECK(private_dir_of("/tmp") == "");
  CHECK(private_dir_of("/tmpfoo/x") == "");
  CHECK(private_dir_of("/srv/tmp/x") == "");
}

TEST_CASE("hidden_host_path: a file of the host the task could not see, from an ENOENT message only") {
  HostTmp host;
  const std::string data = host.path + "/data.txt";
  ChildConfig c = exec_config({"/bin/sh", "-c", "x"});
  CHECK(hidden_host_path(c, "cat: " + data + ": No such file or directory") == data);
  CHECK(hidden_host_path(c, "FileNotFoundError: [Errno 2] No such file or directory: '" + data + "'") == data);
  CHECK(hidden_host_path(c, "ENOENT: no such file or directory, open '" + data + "'") == data);
  // Not ENOENT, not the host's, /tmp itself, or shown to the task: nothing.
  CHECK(hidden_host_path(c, "cat: " + data + ": Permission denied") == "");
  CHECK(hidden_host_path(c, "cat: " + host.path + "/gone: No such file or directory") == "");
  CHECK(hidden_host_path(c, "cat: /tmp/: No such file or directory") == "");
  CHECK(hidden_host_path(c, "cat: /etc/passwd: No such file or directory") == "");
  ChildConfig shared = c;
  shared.policy.isolation.shared = {host.path};
  CHECK(hidden_host_path(shared, "cat: " + data + ": No such file or directory") == "");
  ChildConfig named = c;
  named.keep_visible = {data};
  CHECK(hidden_host_path(named, "cat: " + data + ": No such file or directory") == "");
  // Without a private /tmp the task sees the host's: nothing is hidden.
  ChildConfig host_fs = c;
  host_fs.policy.isolation.tmp_bytes = 0;
  CHECK(hidden_host_path(host_fs, "cat: " + data + ": No such file or directory") == "");
  CHECK(share_for(data) == host.path);
}

TEST_CASE("check_host_view: a named path the task would not see, and shares that cannot be") {
  HostTmp host;
  CHECK(check_host_view(exec_config({"/bin/sh", "-c", "cat {} > " + host.path + "/out.txt"})).message().find(
            "--share " + host.path) != std::string::npos);
  CHECK(check_host_view(exec_config({"/bin/sh", "-c", "cat {} > /tmp/pillbox-unit-no-such-dir/out.txt"})));
  CHECK(check_host_view(exec_config({"/bin/sh", "-c", "cat {} > /tmp/scratch.txt"})));
  ChildConfig writable = exec_config({"/bin/sh", "-c", "cat {} > " + host.path + "/out.txt"});
  writable.policy.isolation.writable = {host.path};
  CHECK(check_host_view(writable));

  ChildConfig whole_tmp = exec_config({"/bin/cat"});
  whole_tmp.policy.isolation.shared = {"/tmp"};
  CHECK(check_host_view(whole_tmp).message().find("gets as its own") != std::string::npos);
  ChildConfig link = exec_config({"/bin/cat"});
  const std::string via = host.path + "/link";
  std::filesystem::create_directory_symlink(host.path, via);
  link.policy.isolation.shared = {via};
  CHECK(check_host_view(link).message().find("goes through a symlink") != std::string::npos);
  ChildConfig missing = exec_config({"/bin/cat"});
  missing.policy.isolation.shared = {host.path + "/nope"};
  CHECK(check_host_view(missing).message().find("does not exist") != std::string::npos);
}
