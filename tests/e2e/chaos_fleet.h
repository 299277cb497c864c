#pragma once
// The worker processes of a chaos test (redis_chaos_test, amqp_chaos_test,
// kafka_chaos_test), written once: each started under a consumer name
// never used before (a killed worker's is not reused: what it held must be
// taken over by another consumer, as on a real fleet), killed and replaced
// by the test. Verdict lines go to each worker's stdout (a file); stderr
// has the notices and the summary.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/e2e/background.h"
#include "tests/e2e/support.h"

namespace e2e {

class ChaosFleet {
 public:
  // A worker runs `pillbox worker BROKER... --consumer NAME OPTIONS... --
  // PROGRAM`, NAME being `prefix` and its number.
  ChaosFleet(std::vector<std::string> broker, std::string prefix, std::string program, std::vector<std::string> options)
      : broker_(std::move(broker)), prefix_(std::move(prefix)), program_(std::move(program)), options_(std::move(options)) {}

  // Starts one more worker; its index.
  std::size_t start() {
    const std::string name = prefix_ + std::to_string(workers_.size());
    std::vector<std::string> args = {"worker"};
    args.insert(args.end(), broker_.begin(), broker_.end());
    args.insert(args.end(), {"--consumer", name});
    args.insert(args.end(), options_.begin(), options_.end());
    args.insert(args.end(), {"--", program_});
    workers_.push_back({name, std::make_unique<Background>(pillbox_binary(), args)});
    return workers_.size() - 1;
  }
  // The workers that have not ended.
  std::vector<std::size_t> running() {
    std::vector<std::size_t> live;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      if (!workers_[i].process->ended()) live.push_back(i);
    }
    return live;
  }
  Background& worker(std::size_t i) { return *workers_[i].process; }
  const std::string& name(std::size_t i) const { return workers_[i].name; }
  std::size_t size() const { return workers_.size(); }
  const std::string& program() const { return program_; }
  // The verdict lines every worker has written so far.
  std::string verdicts() const {
    std::string all;
    for (const auto& w : workers_) all += w.process->out();
    return all;
  }
  // Every worker's stderr (its last 3000 bytes), for a failure's message.
  std::string errors() const {
    std::string all;
    for (const auto& w : workers_) {
      std::string err = w.process->err();
      if (err.size() > 3000) err = "..." + err.substr(err.size() - 3000);
      all += "--- " + w.name + ":\n" + err + "\n";
    }
    return all;
  }

 private:
  struct Worker {
    std::string name;
    std::unique_ptr<Background> process;
  };
  std::vector<std::string> broker_;
  std::string prefix_;
  std::string program_;
  std::vector<std::string> options_;
  std::vector<Worker> workers_;
};

}  // namespace e2e
