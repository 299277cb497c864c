#pragma once
// A task of the ledger as one JSON object: what `pillbox tasks --json`
// prints per line and what the console's GET /api/tasks lists.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "supervisor/store/task_view.h"

namespace pillbox {

// `now_ms` gives "next_retry_in_ms" (0 once the retry is due).
nlohmann::json task_json(const store::TaskRow& row, std::int64_t now_ms);

}  // namespace pillbox
