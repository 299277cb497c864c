// A handler's identity is what runs, not where it was started (issue 26,
// point 2): one command from the project, from its parent or by absolute
// path is one handler, so runs resume and one bug keeps one fingerprint.
// What the scripts hold is the handler's version: an edit makes tasks done
// earlier "done by another version", counted and run again on request, while
// their fingerprints stay. A real Python script in a project tasks see, run
// as a user would.
#include <doctest/doctest.h>
#include <sys/stat.h>

#include <set>
#include <string>

#include "tests/e2e/support.h"

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const char* const kParser =
    "import sys, datetime\n"
    "def parse_date(s):\n"
    "    return datetime.date.fromisoformat(s)\n"
    "for line in open(sys.argv[1]):\n"
    "    name, born = line.strip().split(',')\n"
    "    print(name.upper(), parse_date(born).year)\n";

// exports/: 4 good files, 2 with a date the parser cannot read.
void write_exports(const e2e::TempDir& project) {
  REQUIRE(::mkdir(project.file("exports").c_str(), 0755) == 0);
  for (int i = 1; i <= 6; ++i) {
    const bool bad = i == 2 || i == 5;
    project.write("exports/contacts-00" + std::to_string(i) + ".csv",
                  bad ? "ann,0" + std::to_string(i) + "/01/1990\n" : "ann,1990-01-0" + std::to_string(i) + "\n");
  }
}

std::set<std::string> fingerprints(const std::string& store) {
  std::set<std::string> fps;
  for (const auto& row : e2e::sql_rows(store + "/pillbox.db", "SELECT fingerprint FROM quarantine")) fps.insert(row[0]);
  return fps;
}

}  // namespace

TEST_CASE("one command from the project, from its parent and by absolute path is one handler: resumed, one fingerprint") {
  if (!e2e::have_python3()) return;
  const e2e::Project p;
  p.dir.write("parse_records.py", kParser);
  write_exports(p.dir);
  const std::string inputs = p.dir.file("exports");  // the same keys wherever it runs from
  e2e::TempDir stores;
  const std::string s = stores.path() + "/s";
  const auto first = e2e::pillbox_in(p.dir.path(), {"run", "--store", s, "--json", inputs, "--", e2e::kPython3,
                                                    "parse_records.py", "{}"});
  INFO(first.describe());
  REQUIRE(first.exit_code == 1);
  REQUIRE(first.records.size() == 6);
  REQUIRE(fingerprints(s).size() == 1);
  // From the parent, and from / by absolute path: nothing runs again.
  for (const auto& [cwd, script] :
       {std::pair<std::string, std::string>{p.parent, p.name + "/parse_records.py"},
        std::pair<std::string, std::string>{"/", p.dir.file("parse_records.py")}}) {
    const auto again = e2e::pillbox_in(cwd, {"run", "--store", s, inputs, "--", e2e::kPython3, script, "{}"});
    INFO(again.describe());
    CHECK(again.exit_code == 0);
    CHECK(contains(again.err, "skipped: 4 already ok and 2 already quarantined"));
    CHECK(e2e::sql_int(s + "/pillbox.db", "SELECT count(DISTINCT job) FROM tasks") == 1);
  }
  // A store of its own, run from the parent: the same bug, the same fingerprint.
  const std::string other = stores.path() + "/other";
  const auto elsewhere = e2e::pillbox_in(p.parent, {"run", "--store", other, inputs, "--", e2e::kPython3,
                                                    p.name + "/parse_records.py", "{}"});
  INFO(elsewhere.describe());
  CHECK(elsewhere.exit_code == 1);
  CHECK(fingerprints(other) == fingerprints(s));
}

TEST_CASE("an edited script is a new version: done tasks are counted, run again on request, fingerprints stay") {
  if (!e2e::have_python3()) return;
  const e2e::Project p;
  p.dir.write("parse_records.py", kParser);
  write_exports(p.dir);
  e2e::TempDir stores;
  const std::string s = stores.path() + "/s";
  const std::vector<std::string> run = {"run", "--store", s, "exports", "--", e2e::kPython3, "parse_records.py", "{}"};
  const auto first = e2e::pillbox_in(p.dir.path(), run);
  INFO(first.describe());
  REQUIRE(first.exit_code == 1);
  const std::set<std::string> before = fingerprints(s);
  REQUIRE(before.size() == 1);
  // Unchanged: nothing is outdated.
  const auto same = e2e::pillbox_in(p.dir.path(), run);
  INFO(same.describe());
  CHECK_FALSE(contains(same.err, "versions:"));
  CHECK(contains(same.err, "skipped: 4 already ok and 2 already quarantined"));
  // An edit unrelated to the bug: a comment and another output format.
  std::string edited = std::string("# contacts: NAME YEAR per line\n") + kParser;
  edited.replace(edited.find("print(name.upper(),"), 19, "print(name.lower(),");
  p.dir.write("parse_records.py", edited);
  const auto later = e2e::pillbox_in(p.dir.path(), run);
  INFO(later.describe());
  CHECK(later.exit_code == 0);
  CHECK(contains(later.err, "versions: 4 of the tasks already ok ran under another version of parse_records.py "
                            "(edited since); --rerun-outdated runs them again with this one"));
  std::vector<std::string> rerun = run;
  rerun.insert(rerun.begin() + 1, "--rerun-outdated");
  const auto redone = e2e::pillbox_in(p.dir.path(), rerun);
  INFO(redone.describe());
  CHECK(redone.exit_code == 0);
  CHECK(contains(redone.err, "versions: 4 tasks ok under another version of parse_records.py ran again"));
  CHECK(contains(redone.err, "4 ok"));
  const auto result = e2e::pillbox_in(p.dir.path(), {"results", "--store", s, "exports/contacts-001.csv"});
  INFO(result.describe());
  CHECK(result.out == "ann 1990\n");
  // Now all of them are of this version.
  const auto settled = e2e::pillbox_in(p.dir.path(), run);
  INFO(settled.describe());
  CHECK_FALSE(contains(settled.err, "versions:"));
  // The quarantined ones, run by the edited script in a store of their own:
  // the same fingerprint (a comment moved every line, the output changed).
  const std::string other = stores.path() + "/other";
  std::vector<std::string> fresh = run;
  fresh[2] = other;
  const auto again = e2e::pillbox_in(p.dir.path(), fresh);
  INFO(again.describe());
  CHECK(again.exit_code == 1);
  CHECK(fingerprints(other) == before);
}

TEST_CASE("a clone of a checkout at another place keeps its fingerprints; two programs' main.py elsewhere are two") {
  if (!e2e::have_python3()) return;
  e2e::TempDir place(0755, e2e::host_dir_tasks_see());
  const std::string program = "import sys\n\n\ndef main(p):\n    open(p).read()\n    raise ValueError(p.split('/')[-1])\n\n\nmain(sys.argv[1])\n";
  const std::string input = place.write("in.txt", "x");
  // Two clones of one repository (a .git at the root), the script in tools/.
  for (const std::string clone : {"laptop", "ci"}) {
    REQUIRE(::mkdir(place.file(clone).c_str(), 0755) == 0);
    REQUIRE(::mkdir(place.file(clone + "/.git").c_str(), 0755) == 0);
    REQUIRE(::mkdir(place.file(clone + "/tools").c_str(), 0755) == 0);
    place.write(clone + "/tools/main.py", program);
    const auto run = e2e::pillbox_in(place.file(clone), {"run", "--store", place.file(clone + "-store"), input, "--",
                                                         e2e::kPython3, "tools/main.py", "{}"});
    INFO(run.describe());
    CHECK(run.exit_code == 1);
  }
  CHECK(fingerprints(place.file("laptop-store")) == fingerprints(place.file("ci-store")));
  CHECK(fingerprints(place.file("laptop-store")).size() == 1);
  // Outside any checkout: each program by its own path.
  for (const std::string other : {"billing", "importer"}) {
    REQUIRE(::mkdir(place.file(other).c_str(), 0755) == 0);
    place.write(other + "/main.py", program);
    const auto run = e2e::pillbox_in(place.file(other), {"run", "--store", place.file(other + "-store"), input, "--",
                                                         e2e::kPython3, "main.py", "{}"});
    INFO(run.describe());
    CHECK(run.exit_code == 1);
  }
  CHECK(fingerprints(place.file("billing-store")) != fingerprints(place.file("importer-store")));
}
