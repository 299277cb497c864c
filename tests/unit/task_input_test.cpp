// The replacement strings of an exec command and the payload file's name
// (shared/task_input.h), and the masking of that name in failure messages
// (supervisor/classify/payload_names.h).
#include <doctest/doctest.h>

#include <string>

#include "shared/fingerprint.h"
#include "shared/task_input.h"
#include "supervisor/classify/exception_message.h"
#include "supervisor/classify/payload_names.h"
#include "supervisor/classify/traceback.h"

using namespace pillbox;

TEST_CASE("payload_file_name: the key's last component, or 'payload' when that is no usable name") {
  CHECK(payload_file_name("contacts/contacts-011.csv") == "contacts-011.csv");
  CHECK(payload_file_name("/abs/path/a.tar.gz") == "a.tar.gz");
  CHECK(payload_file_name("plain") == "plain");
  CHECK(payload_file_name("sha256:0123abcd") == "sha256:0123abcd");
  // Hostile or odd keys never name a path outside the payload dir.
  CHECK(payload_file_name("../../etc/passwd") == "passwd");
  CHECK(payload_file_name("dir/") == "payload");
  CHECK(payload_file_name("") == "payload");
  CHECK(payload_file_name(".") == "payload");
  CHECK(payload_file_name("a/..") == "payload");
  CHECK(payload_file_name("...") == "payload");
  // Nothing a shell acts on ({} inside sh -c '...' was always one inert
  // word), and never an option.
  CHECK(payload_file_name("a b;$(id).csv") == "a_b___id_.csv");
  CHECK(payload_file_name("x/`rm -rf ~`|&<>*?!#'\"\\\t\n") == "_rm_-rf" + std::string(16, '_'));
  CHECK(payload_file_name("-rf") == "_rf");
  CHECK(payload_file_name("{}") == "__");
  CHECK(payload_file_name("contacts ñ,v2+final@host:8080=%.csv") == "contacts_ñ,v2+final@host:8080=%.csv");
  CHECK(payload_file_name(std::string("a\0b", 3)) == "a_b");
  CHECK(payload_file_name(std::string(255, 'x')) == std::string(255, 'x'));
  CHECK(payload_file_name(std::string(256, 'x')) == "payload");
  CHECK(payload_file_name("x/" + std::string(256, 'y')) == "payload");
}

TEST_CASE("without_extension: up to the last dot, a leading dot is no extension") {
  CHECK(without_extension("contacts-011.csv") == "contacts-011");
  CHECK(without_extension("a.tar.gz") == "a.tar");
  CHECK(without_extension(".bashrc") == ".bashrc");
  CHECK(without_extension("Makefile") == "Makefile");
  CHECK(without_extension("trailing.") == "trailing");
  CHECK(without_extension("..x") == "..x");  // never "." or "..": {.} stays a name in the payload dir
  CHECK(without_extension("...") == "...");
}

TEST_CASE("which arguments name the payload's file, and which hold any replacement string") {
  for (const char* arg : {"{}", "--in={}", "{.}.json", "{/}", "{/.}", "a{}b"}) {
    CAPTURE(arg);
    CHECK(names_payload_file(arg));
    CHECK(has_replacement_string(arg));
  }
  CHECK_FALSE(names_payload_file("{key}"));
  CHECK(has_replacement_string("--label={key}"));
  for (const char* arg : {"{", "}", "{ }", "{x}", "{{", "plain", "{/x}", "{.x}", "{keys}"}) {
    CAPTURE(arg);
    CHECK_FALSE(has_replacement_string(arg));
  }
}

TEST_CASE("expand_replacement_strings: GNU parallel's strings, each expanded once") {
  const std::string path = std::string(kPayloadDir) + "/contacts-011.csv";
  const std::string key = "contacts/contacts-011.csv";
  CHECK(expand_replacement_strings("{}", path, key) == path);
  CHECK(expand_replacement_strings("{.}", path, key) == std::string(kPayloadDir) + "/contacts-011");
  CHECK(expand_replacement_strings("{/}", path, key) == "contacts-011.csv");
  CHECK(expand_replacement_strings("{/.}", path, key) == "contacts-011");
  CHECK(expand_replacement_strings("{key}", path, key) == key);
  CHECK(expand_replacement_strings("--out={/.}.json --from {key}", path, key) ==
        "--out=contacts-011.json --from contacts/contacts-011.csv");
  CHECK(expand_replacement_strings("{}{}", path, key) == path + path);
  CHECK(expand_replacement_strings("no strings {x}", path, key) == "no strings {x}");
  // What a key expands to is not expanded again.
  CHECK(expand_replacement_strings("{key}", std::string(kPayloadDir) + "/{}", "{}") == "{}");
  CHECK(expand_replacement_strings("{key}{/}", std::string(kPayloadDir) + "/_key_", "x/{key}") == "x/{key}_key_");
  // Without a private /tmp: {} is the memory file; the name still comes from the key.
  CHECK(expand_replacement_strings("{}", kPayloadFdPath, key) == kPayloadFdPath);
  CHECK(expand_replacement_strings("{.}", kPayloadFdPath, key) == kPayloadFdPath);
  CHECK(expand_replacement_strings("{/}", kPayloadFdPath, key) == "contacts-011.csv");
  // An odd key: the name the file really has.
  CHECK(expand_replacement_strings("{/}", std::string(kPayloadDir) + "/payload", "dir/") == "payload");
}

TEST_CASE("mask_payload_names: one bug, one fingerprint, whatever file it met") {
  const auto key_of_message = [](const std::string& message, const std::string& key) {
    return exception_message_key(mask_payload_names(message, key));
  };
  // The same raise site told about three files, in each of the ways a script names its input.
  for (const char* form : {"bad date in {path}", "{name}: bad date", "bad date in {key}"}) {
    CAPTURE(form);
    std::string seen;
    for (const std::string key : {"contacts/contacts-011.csv", "contacts/alice.csv", "b/exported data.csv"}) {
      const std::string name = payload_file_name(key);
      std::string message = form;
      const auto put = [&message](const std::string& what, const std::string& value) {
        if (const auto at = message.find(what); at != std::string::npos) message.replace(at, what.size(), value);
      };
      put("{path}", std::string(kPayloadDir) + "/" + name);
      put("{name}", name);
      put("{key}", key);
      const std::string masked = key_of_message(message, key);
      CAPTURE(message);
      CHECK(masked.find("<payload>") != std::string::npos);
      if (seen.empty()) seen = masked;
      CHECK(masked == seen);
      // A message that is no traceback is hashed through normalize_message.
      CHECK(normalize_message(mask_payload_names(message, key)).find("<payload>") != std::string::npos);
    }
  }
  // The memory file of a host without a private /tmp is the payload too.
  CHECK(mask_payload_names("reading /proc/self/fd/3 failed", "k/a.csv") == "reading <payload> failed");
  // Only what looks like a file's name or a path, as a whole word: a key
  // that is a word ("overflow") must not fold "integer overflow" into
  // "integer underflow" (found by the attack review).
  CHECK(mask_payload_names("integer overflow in decoder", "d/overflow") == "integer overflow in decoder");
  CHECK(mask_payload_names("integer overflow in decoder", "overflow") == "integer overflow in decoder");
  CHECK(mask_payload_names("no data.csv here", "in/a.csv") == "no data.csv here");
  CHECK(mask_payload_names("no a.csv here", "in/a.csv") == "no <payload> here");
  CHECK(mask_payload_names("see in/a.csv", "in/a.csv") == "see <payload>");
  CHECK(mask_payload_names("... and more", "...") == "... and more");
  CHECK(mask_payload_names("anything", "") == "anything");
  // The raw name and the file's (made shell-inert) both.
  CHECK(mask_payload_names("a b.csv or a_b.csv", "x/a b.csv") == "<payload> or <payload>");
}

TEST_CASE("mask_payload_frames: a script that is the payload has one crash state, with or without a private /tmp") {
  for (const std::string file : {"alpha.py", "3"}) {
    CAPTURE(file);
    Traceback tb;
    tb.exception_type = "ZeroDivisionError";
    tb.frames = {{"f", file, false}, {"<module>", file, false}, {"helper", "lib.py", false}};
    mask_payload_frames(tb, "pyin/alpha.py");
    CHECK(traceback_state(tb) ==
          std::vector<std::string>{"ZeroDivisionError", "f (<payload>)", "<module> (<payload>)", "helper (lib.py)"});
  }
  Traceback other;
  other.frames = {{"f", "beta.py", false}};
  mask_payload_frames(other, "pyin/alpha.py");
  CHECK(other.frames[0].file == "beta.py");
}
