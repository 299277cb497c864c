#include "supervisor/broker/fleet_log_minimize_keeper.h"

#include <chrono>
#include <optional>
#include <string_view>
#include <utility>


namespace pillbox::broker {
namespace {

using Clock = std::chrono::steady_clock;

// Improvements saved at most this often after the first (each save is a
// compare and set of the state log, and most an append besides).
constexpr std::chrono::seconds kProgressEvery{5};

class LogMinimizeKeeper final : public MinimizeKeeper {
 public:
  LogMinimizeKeeper(FleetDeadLetters& quarantine, std::unique_ptr<PayloadLog> payloads, std::string id,
                    std::string actor)
      : q_(quarantine), id_(std::move(id)), actor_(std::move(actor)), payloads_(std::move(payloads)) {}

  Expected<std::optional<Saved>> load() override {
    auto record = q_.get(id_);
    if (!record) return Error{record.error(), record.error_code()};
    const FleetState& state = record->state;
    if (!state.minimize) return std::optional<Saved>{};
    std::string why_not;
    auto best = read_minimization(*payloads_, state.minimize_best_at, *record, state.minimize->best_sha256, why_not);
    if (!best) return Error{best.error(), best.error_code()};
    if (!*best) return std::optional<Saved>{};  // no progress: the search starts over
    appended_sha256_ = state.minimize->best_sha256;
    appended_at_ = state.minimize_best_at;
    return std::optional<Saved>(Saved{*state.minimize, std::move(**best)});
  }

  Status clear() override {
    return q_.change_state(id_, false, [](FleetState& s, const FleetRecord&) {
      s.minimize.reset();
      s.minimize_best_at = -1;
      return Status::ok();
    }).status();
  }

  bool saves_progress_now() override { return !last_save_ || Clock::now() - *last_save_ >= kProgressEvery; }

  // The bytes first, then the state that names them.
  Status save(std::string_view best, const store::MinimizeState& state) override {
    if (state.best_sha256 != appended_sha256_) {
      auto at = payloads_->append(id_, best);
      if (!at) return Status::error(at.error(), at.error_code());
      appended_sha256_ = state.best_sha256;
      appended_at_ = *at;
    }
    auto changed = q_.change_state(id_, false, [&](FleetState& s, const FleetRecord&) {
      s.minimize = state;
      s.minimize_best_at = appended_at_;
      return Status::ok();
    });
    if (!changed) return changed.status();
    last_save_ = Clock::now();
    return Status::ok();
  }

  Status record(const std::string& sha256, const std::string& detail) override {
    // minimize_payload saved this payload just before: it is at appended_at_.
    if (sha256 != appended_sha256_) {
      return Status::error("the minimized payload of record " + id_ + " was not saved to " + payloads_->name() +
                           " before it was recorded (a bug of pillbox's); run minimize again");
    }
    return record_minimized(q_, id_, sha256, appended_at_, actor_, detail);
  }

 private:
  FleetDeadLetters& q_;
  std::string id_;
  std::string actor_;
  std::unique_ptr<PayloadLog> payloads_;
  std::optional<Clock::time_point> last_save_;  // none yet this session: the first improvement is saved at once
  std::string appended_sha256_;                 // the best payload in NAME.dlq.minimized, and where
  std::int64_t appended_at_ = -1;
};

}  // namespace

std::unique_ptr<MinimizeKeeper> log_minimize_keeper(FleetDeadLetters& quarantine, std::unique_ptr<PayloadLog> payloads,
                                                    std::string id, std::string actor) {
  return std::make_unique<LogMinimizeKeeper>(quarantine, std::move(payloads), std::move(id), std::move(actor));
}

}  // namespace pillbox::broker
