#pragma once
// A test's EndAttempt (supervisor/flow/ledger_batch.h), as the engine writes one.
#include <cstdint>
#include <string>

#include "supervisor/flow/ledger_batch.h"

namespace pillbox::test {

// The end of attempt `n` of a task, as the engine writes it (charged; its
// message is its kind).
inline EndAttempt ended(std::int64_t task_id, std::uint32_t n, const std::string& kind, const std::string& fingerprint = "") {
  EndAttempt end;
  end.task_id = task_id;
  end.n = n;
  end.outcome.kind = kind;
  end.outcome.fingerprint = fingerprint;
  end.outcome.message = kind == "ok" ? "" : kind;
  return end;
}

}  // namespace pillbox::test
