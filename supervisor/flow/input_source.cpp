#include "supervisor/flow/input_source.h"
#include "supervisor/flow/input_total.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <unordered_map>

#include "shared/base64.h"
#include "shared/sha256.h"
#include "supervisor/io/terminal_text.h"

namespace pillbox {
namespace {

// The keys of the JSON lines read so far, to tell a key given twice: with
// another payload (a warning; both run, their results kept apart), or with
// the same payload (one task, run once). Bounded: past kMaxBytes of keys the
// check stops, once, with a notice, rather than grow with the input.
class KeysSeen {
 public:
  void check(TaskSource::Item& item, std::uint64_t line_no) {
    Task& task = item.task;
    if (full_) return;
    const Seen now{line_no, digest_of(task.payload_sha256)};
    auto [it, inserted] = first_.try_emplace(task.key, now);
    if (inserted) {
      bytes_ += task.key.size() + kOverhead;
      if (bytes_ > kMaxBytes) {
        full_ = true;
        first_.clear();
        more_.clear();
        item.notice = "stdin:" + std::to_string(line_no) + ": over " + std::to_string(kMaxBytes >> 20) +
                      " MiB of keys; keys given twice are no longer reported from here on";
      }
      return;
    }
    const std::string shown = table_cell(task.key, 200);
    const Seen* same = it->second.digest == now.digest ? &it->second : nullptr;
    for (auto [m, end] = more_.equal_range(task.key); same == nullptr && m != end; ++m) {
      if (m->second.digest == now.digest) same = &m->second;
    }
    if (same != nullptr) {
      task.repeat_of_line = same->line;
      item.notice = "stdin:" + std::to_string(line_no) + ": key '" + shown + "' with the same payload as line " +
                    std::to_string(same->line) + ": one task, run once";
      return;
    }
    task.key_reused = true;
    item.notice = "stdin:" + std::to_string(line_no) + ": warning: key '" + shown + "' was given line " +
                  std::to_string(it->second.line) + " with another payload; both run, and their results are " +
                  "kept apart (--out: this one's file name ends in ~" + task.payload_sha256.substr(0, 16) + ".out)";
    bytes_ += task.key.size() + kOverhead;
    more_.emplace(task.key, now);
  }

 private:
  // One entry per distinct key for the whole of stdin (bench/README.md:
  // ~90 bytes per short key, was ~250 with the digest kept as hex); bounded
  // all the same.
  static constexpr std::size_t kMaxBytes = 64u << 20;
  static constexpr std::size_t kOverhead = 96;  // a node and its bookkeeping, roughly
  // Payloads are told apart by the first 128 bits of their SHA-256: the
  // same key with two payloads that collide there would be taken for one.
  using Digest = std::array<unsigned char, 16>;
  struct Seen {
    std::uint64_t line;
    Digest digest;
  };
  static Digest digest_of(const std::string& sha256_hex) {
    Digest d{};
    for (std::size_t i = 0; i < d.size() && 2 * i + 1 < sha256_hex.size(); ++i) {
      auto nibble = [](char c) { return static_cast<unsigned char>(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10); };
      d[i] = static_cast<unsigned char>(nibble(sha256_hex[2 * i]) << 4 | nibble(sha256_hex[2 * i + 1]));
    }
    return d;
  }
  std::unordered_map<std::string, Seen> first_;       // the first line of each key
  std::unordered_multimap<std::string, Seen> more_;  // the same key with other payloads (rare)
  std::size_t bytes_ = 0;
  bool full_ = false;
};

// JSON lines from a file descriptor, parsed on a reader thread into a bounded
// queue; an eventfd wakes the dispatcher. The state is shared with the thread,
// which may outlive the reader while blocked in read(2) on a terminal or pipe.
class JsonLinesReader {
 public:
  explicit JsonLinesReader(int fd) : state_(std::make_shared<State>()) {
    state_->event = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    std::thread([state = state_, fd] { run(*state, fd); }).detach();
  }
  ~JsonLinesReader() {
    {
      std::lock_guard<std::mutex> lock(state_->mu);
      state_->stop = true;
    }
    state_->space.notify_all();
  }
  int fd() const { return state_->event; }

  TaskSource::Item next() {
    State& st = *state_;
    std::lock_guard<std::mutex> lock(st.mu);
    uint64_t drained;
    (void)!::read(st.event, &drained, sizeof drained);
    if (!st.queue.empty()) {
      TaskSource::Item item = std::move(st.queue.front());
      st.queue.pop_front();
      st.space.notify_one();
      return item;
    }
    TaskSource::Item item;
    item.type = st.eof ? TaskSource::Item::Type::kEnd : TaskSource::Item::Type::kWait;
    return item;
  }

 private:
  static constexpr std::size_t kQueueCap = 256;

  struct State {
    ~State() {
      if (event >= 0) ::close(event);
    }
    int event = -1;
    std::mutex mu;
    std::condition_variable space;
    std::deque<TaskSource::Item> queue;
    bool eof = false;
    bool stop = false;
  };

  static void signal(State& st) {
    const uint64_t one = 1;
    (void)!::write(st.event, &one, sizeof one);
  }

  // Returns false when the reader is gone.
  static bool push(State& st, TaskSource::Item item) {
    std::unique_lock<std::mutex> lock(st.mu);
    st.space.wait(lock, [&st] { return st.stop || st.queue.size() < kQueueCap; });
    if (st.stop) return false;
    st.queue.push_back(std::move(item));
    signal(st);
    return true;
  }

  static void run(State& st, int fd) {
    KeysSeen keys;
    std::string buf, line;
    std::uint64_t line_no = 0;
    char chunk[65536];
    bool eof = false;
    while (!eof) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        eof = true;
      } else {
        buf.append(chunk, static_cast<std::size_t>(n));
      }
      std::size_t start = 0;
      for (;;) {
        const std::size_t nl = buf.find('\n', start);
        if (nl == std::string::npos) {
          if (!eof || start == buf.size()) break;
          line.assign(buf, start, std::string::npos);  // last line without a newline
          start = buf.size();
        } else {
          line.assign(buf, start, nl - start);
          start = nl + 1;
        }
        ++line_no;
        if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
        TaskSource::Item item;
        auto task = parse_task_line(line, line_no);
        if (task) {
          item.type = TaskSource::Item::Type::kTask;
          item.task = std::move(*task);
          keys.check(item, line_no);
        } else {
          item.type = TaskSource::Item::Type::kError;
          item.error = task.error();
        }
        if (!push(st, std::move(item))) return;
      }
      buf.erase(0, start);
      if (buf.size() > kMaxPayloadBytes * 2) {
        TaskSource::Item item;
        item.type = TaskSource::Item::Type::kError;
        item.error = "stdin:" + std::to_string(line_no + 1) + ": line longer than the payload limit; rest of stdin ignored";
        push(st, std::move(item));
        break;
      }
    }
    std::lock_guard<std::mutex> lock(st.mu);
    st.eof = true;
    signal(st);
  }

  std::shared_ptr<State> state_;
};

class InputSource final : public TaskSource {
 public:
  struct Entry {
    bool is_stdin = false;
    InputEntry file;  // when not stdin
  };
  InputSource(std::vector<Entry> entries, int stdin_fd) : entries_(std::move(entries)), stdin_fd_(stdin_fd) {}

  Item next() override {
    while (index_ < entries_.size()) {
      const Entry& e = entries_[index_];
      if (!e.is_stdin) {
        ++index_;
        Item item;
        if (!e.file.skipped.empty()) {
          // Found inside a directory and not a regular file: an input error,
          // listed where it sorts, so that it is neither read nor lost.
          item.type = Item::Type::kError;
          item.error = "skipped input '" + e.file.path + "': " + e.file.skipped;
          return item;
        }
        auto payload = read_input(e.file, kMaxPayloadBytes);
        if (!payload) {
          item.type = Item::Type::kError;
          item.error = payload.error();
        } else {
          item.type = Item::Type::kTask;
          item.task = Task{e.file.path, std::move(*payload)};
        }
        return item;
      }
      if (!stdin_) stdin_ = std::make_unique<JsonLinesReader>(stdin_fd_);
      Item item = stdin_->next();
      if (item.type != Item::Type::kEnd) return item;
      ++index_;
    }
    return Item{};
  }

  int wait_fd() const override { return stdin_ ? stdin_->fd() : -1; }

  std::optional<std::size_t> known_total() const {
    for (const Entry& e : entries_) {
      if (e.is_stdin) return std::nullopt;
    }
    return entries_.size();
  }

 private:
  std::vector<Entry> entries_;
  std::size_t index_ = 0;
  int stdin_fd_;
  std::unique_ptr<JsonLinesReader> stdin_;
};

}  // namespace

Expected<Task> parse_task_line(std::string_view line, std::uint64_t line_number) {
  const std::string where = "stdin:" + std::to_string(line_number) + ": ";
  // nlohmann's lexer takes a NUL byte for the end of the input, so
  // '{"key":"a","payload":"x"}\0anything' would parse with the rest
  // silently dropped. JSON text holds no raw NUL: reject the line.
  if (const auto nul = line.find('\0'); nul != std::string_view::npos) {
    return Error{where + "invalid JSON at byte " + std::to_string(nul + 1) + ": a NUL byte (escape it as \\u0000)"};
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    return Error{where + "invalid JSON at byte " + std::to_string(e.byte) +
                 " (expected {\"key\": ..., \"payload\": \"...\"} or \"payload_b64\")"};
  }
  if (!j.is_object()) return Error{where + "expected a JSON object with \"payload\" or \"payload_b64\""};
  Task t;
  const auto key = j.find("key");
  const bool derive_key = key == j.end() || key->is_null();
  if (!derive_key) {
    // Not converted: 1, 1.0 and 1e0 are one number but three texts, and a
    // key that silently differs from what the producer wrote breaks resume.
    if (!key->is_string()) {
      return Error{where + "\"key\" must be a string, not " + std::string(key->type_name()) +
                   " (quote it: \"key\": \"...\")"};
    }
    t.key = key->get<std::string>();
    if (t.key.find('\0') != std::string::npos) {
      return Error{where + "\"key\" holds a NUL byte (\\u0000), which no file name, argument or environment "
                           "variable can carry"};
    }
    if (t.key.size() > kMaxTaskKeyBytes) {
      return Error{where + "\"key\" is " + std::to_string(t.key.size()) + " bytes, over the limit of " +
                   std::to_string(kMaxTaskKeyBytes) + " (a key names a task; what it is about goes in the payload)"};
    }
  }
  const auto text = j.find("payload");
  const auto b64 = j.find("payload_b64");
  if ((text != j.end()) == (b64 != j.end())) {
    return Error{where + "exactly one of \"payload\" (text) or \"payload_b64\" (base64) is required"};
  }
  if (text != j.end()) {
    if (!text->is_string()) return Error{where + "\"payload\" must be a string (use \"payload_b64\" for binary)"};
    t.payload = text->get<std::string>();
  } else {
    if (!b64->is_string()) return Error{where + "\"payload_b64\" must be a base64 string"};
    auto decoded = base64_decode(b64->get_ref<const std::string&>());
    if (!decoded) return Error{where + "\"payload_b64\" is not valid base64"};
    t.payload = std::move(*decoded);
  }
  if (t.payload.size() > kMaxPayloadBytes) return Error{where + "payload larger than the 1 GiB limit"};
  t.payload_sha256 = sha256_hex(t.payload);
  if (derive_key) t.key = content_key(t.payload_sha256);
  return t;
}

std::optional<std::size_t> known_total(const TaskSource& source) {
  const auto* inputs = dynamic_cast<const InputSource*>(&source);
  return inputs != nullptr ? inputs->known_total() : std::nullopt;
}

std::string content_key(const std::string& payload_sha256) { return "sha256:" + payload_sha256.substr(0, 16); }

Expected<std::unique_ptr<TaskSource>> open_inputs(const std::vector<std::string>& inputs, int stdin_fd,
                                                  SymlinksInTree symlinks) {
  std::vector<InputSource::Entry> entries;
  bool saw_stdin = false;
  for (const auto& input : inputs) {
    if (input == "-") {
      if (saw_stdin) return Error{"'-' (stdin) may be given only once"};
      saw_stdin = true;
      entries.push_back({true, {}});
      continue;
    }
    auto listed = list_input(input, symlinks);
    if (!listed) return Error{listed.error()};
    for (auto& file : *listed) {
      // Named on the command line and not a regular file: refused before
      // anything runs, like a missing one.
      if (file.path == input && !file.skipped.empty()) {
        return Error{"input '" + input + "' is " + file.skipped +
                     " (inputs are regular files, directories, or - for JSON lines on stdin)"};
      }
      entries.push_back({false, std::move(file)});
    }
  }
  if (entries.empty() && !inputs.empty()) {
    return Error{"no input files found in " + inputs.front() + (inputs.size() > 1 ? " ..." : "")};
  }
  return std::unique_ptr<TaskSource>(new InputSource(std::move(entries), stdin_fd));
}

}  // namespace pillbox
