// The pdf-text handler on real documents (tests/fixtures/pdf/, whose README
// says how each was made and what it exercises), held against poppler's own
// pdftotext: a built-in handler must not fail valid input. Every document
// pdftotext extracts must come back ok with the same text, in both launch
// modes; one it refuses must come back as a clean handler-error. A
// seccomp-violation or a crash would quarantine a valid document.
#include <dirent.h>
#include <unistd.h>

#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/e2e/support.h"

namespace {

const std::string kCorpusDir = PILLBOX_SOURCE_DIR "/tests/fixtures/pdf";

// The strict policy's limits (policies/strict.policy), for pdftotext: its CPU
// time, and its memory as the address-space backstop pillbox sets beside a
// memory cgroup (twice the limit).
const std::vector<std::string> kStrictLimits = {"--cpu=5", "--as=" + std::to_string(2 * 512LL * 1024 * 1024)};

std::vector<std::string> corpus() {
  std::vector<std::string> files;
  DIR* dir = ::opendir(kCorpusDir.c_str());
  REQUIRE_MESSAGE(dir != nullptr, "cannot open " << kCorpusDir);
  while (const dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".pdf") == 0) files.push_back(kCorpusDir + "/" + name);
  }
  ::closedir(dir);
  std::sort(files.begin(), files.end());
  REQUIRE_MESSAGE(files.size() >= 15, "the corpus in " << kCorpusDir << " is incomplete");
  return files;
}

// `name` in the directories a Debian package installs programs to, or "".
std::string find_program(const std::string& name) {
  for (const char* dir : {"/usr/local/bin", "/usr/bin", "/bin"}) {
    const std::string path = std::string(dir) + "/" + name;
    if (::access(path.c_str(), X_OK) == 0) return path;
  }
  return {};
}

std::vector<std::string> words_of(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (const char c : text) {
    // ASCII whitespace only (form feeds between pages included): both sides
    // write the same UTF-8 for everything else.
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\f' || c == '\v') {
      if (!word.empty()) words.push_back(std::move(word));
      word.clear();
    } else {
      word += c;
    }
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

// What poppler's own command-line tool makes of a document.
struct Reference {
  bool extracted = false;
  std::string text;     // when extracted
  std::string refusal;  // otherwise: its exit code and message
};

std::map<std::string, Reference> pdftotext_references(const std::string& pdftotext, const std::string& prlimit,
                                                      const std::vector<std::string>& files) {
  std::map<std::string, Reference> refs;
  for (const auto& file : files) {
    std::vector<std::string> command = {pdftotext, "-enc", "UTF-8", file, "-"};
    if (!prlimit.empty()) {
      command.insert(command.begin(), kStrictLimits.begin(), kStrictLimits.end());
      command.insert(command.begin(), prlimit);
    }
    const e2e::RunResult r = e2e::run_command(command[0], {command.begin() + 1, command.end()});
    Reference& ref = refs[file];
    ref.extracted = r.exit_code == 0;
    if (ref.extracted) ref.text = r.out;
    else ref.refusal = "exit " + std::to_string(r.exit_code) + ": " + r.err;
  }
  return refs;
}

// pillbox's text against pdftotext's: the same once whitespace is
// normalised, or else the same words as often in another order (poppler-cpp
// keeps the physical layout, pdftotext reading order; form fields move).
void check_same_text(const std::string& got, const std::string& want) {
  const std::vector<std::string> got_words = words_of(got), want_words = words_of(want);
  if (joined(got_words) == joined(want_words)) return;
  std::vector<std::string> got_sorted = got_words, want_sorted = want_words;
  std::sort(got_sorted.begin(), got_sorted.end());
  std::sort(want_sorted.begin(), want_sorted.end());
  INFO("pillbox:   " << joined(got_words));
  INFO("pdftotext: " << joined(want_words));
  CHECK(got_sorted == want_sorted);
}

std::vector<std::string> pdf_text_run(const std::string& mode, const std::vector<std::string>& files) {
  std::vector<std::string> args = {"run", "--json", "--no-store", "--mode", mode, "--handler", "pdf-text"};
  args.insert(args.end(), files.begin(), files.end());
  return args;
}

}  // namespace

TEST_CASE("pdf-text: every document pdftotext extracts comes back ok with its text, in both modes") {
  const std::vector<std::string> files = corpus();
  const std::string pdftotext = find_program("pdftotext");
  std::map<std::string, Reference> refs;
  if (pdftotext.empty()) {
    MESSAGE("skipped: the comparison with pdftotext, which is not installed (apt package poppler-utils); "
            "still checked: no document is a seccomp-violation or a crash");
  } else {
    refs = pdftotext_references(pdftotext, find_program("prlimit"), files);
  }

  for (const std::string mode : {"zygote", "spawn"}) {
    CAPTURE(mode);
    const e2e::RunResult r = e2e::run_pillbox(pdf_text_run(mode, files));
    INFO(r.describe());
    REQUIRE(r.records.size() == files.size());
    for (const auto& file : files) {
      CAPTURE(file);
      const nlohmann::json& rec = r.record(file);
      INFO("kind " << rec["kind"] << ", syscall " << rec["syscall"] << ", message " << rec["message"]);
      if (pdftotext.empty()) {
        CHECK((rec["kind"] == "ok" || rec["kind"] == "handler-error"));
        continue;
      }
      const Reference& ref = refs.at(file);
      if (!ref.extracted) {
        INFO("pdftotext refused it: " << ref.refusal);
        CHECK(rec["kind"] == "handler-error");
        continue;
      }
      CHECK(rec["kind"] == "ok");
      if (rec["kind"] == "ok") check_same_text(rec["output"].get<std::string>(), ref.text);
    }
  }
}

// The zygote (or, in spawn mode, the process before it confines itself)
// loads fontconfig's configuration and font cache. On a host where the cache
// was never built and cannot be written, or where fontconfig has no
// configuration and no fonts at all, that must still happen there: a child
// that tried would be a seccomp-violation. Each setting is made in a private
// mount namespace (util-linux unshare), so the host's fonts stay untouched.
TEST_CASE("pdf-text: no font cache, or no fontconfig configuration and no fonts, is still no violation") {
  const std::string unshare = find_program("unshare");
  if (!e2e::is_root() || unshare.empty()) {
    MESSAGE("skipped: needs root and unshare(1) to hide the font cache and configuration in a mount namespace");
    return;
  }
  // The form makes poppler ask fontconfig for a font per Greek and Chinese
  // character of its fields; the others name fonts they do not embed.
  const std::map<std::string, std::string> documents = {
      {kCorpusDir + "/libreoffice-form-non-latin-values.pdf", "Membership"},
      {kCorpusDir + "/groff-base14.pdf", "Invoice"},
      {kCorpusDir + "/truetype-arial-not-embedded.pdf", "Quarterly"},
  };
  std::vector<std::string> files;
  for (const auto& [file, word] : documents) files.push_back(file);

  // An empty read-only file system over a directory, when it exists.
  auto hide = [](const std::string& dir) {
    return "if [ -d " + dir + " ]; then mount -t tmpfs -o ro pillbox-test " + dir + " || exit 97; fi; ";
  };
  const std::map<std::string, std::string> hosts = {
      {"no font cache, and none can be written", hide("/var/cache/fontconfig")},
      {"no fontconfig configuration and no fonts", hide("/etc/fonts") + hide("/usr/share/fonts")},
  };
  for (const auto& [host, mounts] : hosts) {
    for (const std::string mode : {"zygote", "spawn"}) {
      const std::string& host_kind = host;  // clang 14 cannot capture a structured binding
      CAPTURE(host_kind);
      CAPTURE(mode);
      // sh -c SCRIPT pillbox ARGS...: the script mounts, then execs "$0" "$@".
      std::vector<std::string> args = {"--mount", "/bin/sh", "-c", mounts + "exec \"$0\" \"$@\"",
                                       e2e::pillbox_binary()};
      const std::vector<std::string> run = pdf_text_run(mode, files);
      args.insert(args.end(), run.begin(), run.end());
      const e2e::RunResult r = e2e::run_command(unshare, args);
      INFO(r.describe());
      REQUIRE(r.exit_code != 97);
      REQUIRE(r.records.size() == files.size());
      for (const auto& [file, word] : documents) {
        const std::string& document = file;  // clang 14 cannot capture a structured binding
        CAPTURE(document);
        const nlohmann::json& rec = r.record(file);
        INFO("kind " << rec["kind"] << ", syscall " << rec["syscall"] << ", message " << rec["message"]);
        CHECK(rec["kind"] == "ok");
        if (rec["kind"] == "ok") CHECK(rec["output"].get<std::string>().find(word) != std::string::npos);
      }
    }
  }
}
