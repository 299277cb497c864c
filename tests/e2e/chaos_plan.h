#pragma once
// The tasks of the chaos tests (redis_chaos_test, amqp_chaos_test,
// kafka_chaos_test), written once: good ones and poison ones for the
// mixed_poison fixture (task_program.h), keys unique to the run, shuffled
// with the test's seed so that a failure can be replayed
// (PILLBOX_CHAOS_SEED).
#include <algorithm>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace e2e {

struct ChaosTask {
  std::string key;
  std::string payload;
  char kind = 'g';  // 'g' good, else the poison's first byte (mixed_poison's command)
};

// `good` good tasks ("good-NNNN") and `poison` poison ones
// ("poison-K-NN"), their kinds `kinds` in turn (S, A: crashes; L: spins),
// and `extra`, shuffled with `rng`.
inline std::vector<ChaosTask> chaos_plan(int good, int poison, std::string_view kinds, std::mt19937_64& rng,
                                         std::vector<ChaosTask> extra = {}) {
  std::vector<ChaosTask> tasks;
  for (int i = 0; i < good; ++i) {
    char key[32];
    std::snprintf(key, sizeof key, "good-%04d", i);
    tasks.push_back({key, "good payload " + std::to_string(i), 'g'});
  }
  for (int i = 0; i < poison; ++i) {
    const char k = kinds[static_cast<std::size_t>(i) % kinds.size()];
    char key[32];
    std::snprintf(key, sizeof key, "poison-%c-%02d", k, i);
    tasks.push_back({key, std::string(1, k) + " poison " + std::to_string(i), k});
  }
  for (ChaosTask& t : extra) tasks.push_back(std::move(t));
  std::shuffle(tasks.begin(), tasks.end(), rng);
  return tasks;
}

}  // namespace e2e
