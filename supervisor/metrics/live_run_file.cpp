#include "supervisor/metrics/live_run_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <ctime>
#include <vector>

#include "shared/control.h"
#include "shared/failure_kind.h"
#include "shared/unique_fd.h"
#include "supervisor/store/process_claim.h"

namespace pillbox::metrics {
namespace {

using nlohmann::json;

// UTC with milliseconds, as the store writes its times (supervisor/store/schema.cpp).
std::string utc_now() {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME, &ts);
  std::tm tm{};
  ::gmtime_r(&ts.tv_sec, &tm);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03ldZ", ts.tv_nsec / 1'000'000);
  return text;
}

std::uint64_t tasks_total(const RunMetrics::Counters& c) {
  std::uint64_t total = 0;
  for (const auto& [key, n] : c.tasks) total += n;
  return total;
}

// "123.json" → 123; anything else → 0.
std::int64_t run_id_of(const std::string& name) {
  constexpr std::string_view suffix = ".json";
  if (name.size() <= suffix.size() || name.size() > 20 + suffix.size()) return 0;
  if (name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) return 0;
  std::int64_t id = 0;
  for (std::size_t i = 0; i + suffix.size() < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return 0;
    if (id > (INT64_MAX - 9) / 10) return 0;
    id = id * 10 + (name[i] - '0');
  }
  return id;
}

}  // namespace

std::string live_dir(const std::string& store_dir) { return store_dir + "/live"; }

json live_run_json(std::int64_t run_id, const RunMetrics::Counters& c, const std::string& started_at,
                   double tasks_per_second) {
  json tasks = json::array();
  for (const auto& [key, n] : c.tasks) {
    tasks.push_back({{"kind", std::string(to_string(key.first))}, {"verdict", key.second}, {"count", n}});
  }
  json attempts = json::object();
  for (const auto& [kind, n] : c.attempts) attempts[std::string(to_string(kind))] = n;
  return {{"run_id", run_id},
          {"pid", static_cast<long>(::getpid())},
          {"claim", store::process_claim_token()},
          {"started_at", started_at},
          {"updated_at", utc_now()},
          {"tasks", std::move(tasks)},
          {"tasks_total", tasks_total(c)},
          {"attempts", std::move(attempts)},
          {"input_errors", c.input_errors},
          {"slots", {{"busy", c.busy}, {"total", c.slots}}},
          {"breaker", c.breaker_open ? "open" : "closed"},
          {"tasks_per_second", tasks_per_second}};
}

LiveRunFile::LiveRunFile(std::string store_dir, std::int64_t run_id, const RunMetrics& metrics,
                         std::chrono::milliseconds interval)
    : dir_(live_dir(store_dir)),
      path_(dir_ + "/" + std::to_string(run_id) + ".json"),
      run_id_(run_id),
      metrics_(metrics),
      interval_(interval),
      started_at_(utc_now()) {
  // The first write before the constructor returns: the run is visible from
  // its first task on.
  write_once();
  thread_ = std::thread([this] { loop(); });
}

LiveRunFile::~LiveRunFile() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
  ::unlink(path_.c_str());
}

void LiveRunFile::loop() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, interval_, [this] { return stopping_; })) {
    lock.unlock();
    write_once();
    lock.lock();
  }
}

void LiveRunFile::write_once() {
  const RunMetrics::Counters c = metrics_.snapshot();
  const auto now = std::chrono::steady_clock::now();
  const std::uint64_t total = tasks_total(c);
  samples_.emplace_back(now, total);
  while (samples_.size() > 1 && now - samples_.front().first > kRateWindow) samples_.pop_front();
  double rate = 0;
  const auto span = std::chrono::duration<double>(now - samples_.front().first).count();
  if (span > 0) rate = static_cast<double>(total - samples_.front().second) / span;

  const std::string text = live_run_json(run_id_, c, started_at_, rate).dump() + "\n";
  if (::mkdir(dir_.c_str(), 0700) != 0 && errno != EEXIST) return;
  const std::string temp = dir_ + "/." + std::to_string(run_id_) + ".json.tmp";
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return;
  const bool written(write_all(fd, text));
  ::close(fd);
  if (!written || ::rename(temp.c_str(), path_.c_str()) != 0) ::unlink(temp.c_str());
}

json read_live_runs(const std::string& store_dir, bool remove_gone) {
  json runs = json::array();
  // The directory by a descriptor of its own, never through a symlink: every
  // name below is opened, and a gone run's file removed, in this directory,
  // whatever its path names meanwhile.
  const UniqueFd dir(::open(live_dir(store_dir).c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (!dir.valid()) return runs;
  const int dir_fd = dir.get();
  DIR* d = ::fdopendir(::dup(dir_fd));
  if (d == nullptr) return runs;
  std::vector<std::pair<std::int64_t, std::string>> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (const std::int64_t id = run_id_of(name); id > 0) names.emplace_back(id, name);
  }
  ::closedir(d);
  // The newest runs first: files another host's runs left, which are never
  // removed here, cannot hide a new run behind the limit.
  std::sort(names.begin(), names.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (names.size() > kMaxLiveFiles) names.resize(kMaxLiveFiles);
  std::sort(names.begin(), names.end());
  for (const auto& [id, name] : names) {
    const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
    if (fd < 0) continue;  // gone since the listing (the run ended), or a symlink
    struct stat st{};
    std::string text;
    const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    if (regular && static_cast<std::size_t>(st.st_size) <= kMaxLiveFileBytes) {
      text.resize(static_cast<std::size_t>(st.st_size));
      const ssize_t n = ::read(fd, text.data(), text.size());
      text.resize(n > 0 ? static_cast<std::size_t>(n) : 0);
    }
    ::close(fd);
    json run = json::parse(text, nullptr, false);
    if (!run.is_object() || !run.contains("claim") || !run["claim"].is_string()) continue;
    if (!run.contains("run_id") || run["run_id"] != id) continue;
    switch (store::claim_holder(run["claim"].get<std::string>())) {
      case store::ClaimHolder::kGone: {
        // Only the file that was read: not one a new run wrote under the
        // same name since (a rename replaces the inode).
        struct stat now{};
        if (remove_gone && ::fstatat(dir_fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
            now.st_dev == st.st_dev) {
          ::unlinkat(dir_fd, name.c_str(), 0);
        }
        continue;
      }
      case store::ClaimHolder::kLive:
        run["holder"] = "live";
        break;
      case store::ClaimHolder::kOtherHost:
        run["holder"] = "other host";
        break;
    }
    runs.push_back(std::move(run));
  }
  return runs;
}

}  // namespace pillbox::metrics
