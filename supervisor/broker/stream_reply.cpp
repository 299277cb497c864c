#include "supervisor/broker/stream_reply.h"

#include <algorithm>

#include "supervisor/broker/redis_connection.h"

namespace pillbox::broker {

const std::string* entry_field(const EntryFields& fields, std::string_view name) {
  for (const auto& [k, v] : fields) {
    if (k == name) return &v;
  }
  return nullptr;
}

std::string* entry_field(EntryFields& fields, std::string_view name) {
  return const_cast<std::string*>(entry_field(std::as_const(fields), name));
}

std::string field_or_empty(const EntryFields& fields, std::string_view name) {
  const std::string* v = entry_field(fields, name);
  return v != nullptr ? *v : std::string();
}

EntryFields field_pairs(const redisReply* r) {
  EntryFields out;
  if (r == nullptr || r->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i + 1 < r->elements; i += 2) {
    out.emplace_back(reply_text(r->element[i]), reply_text(r->element[i + 1]));
  }
  return out;
}

std::vector<StreamEntry> stream_entries(const redisReply* list, std::size_t size, bool or_more) {
  std::vector<StreamEntry> out;
  if (list == nullptr || list->type != REDIS_REPLY_ARRAY) return out;
  for (std::size_t i = 0; i < list->elements; ++i) {
    const redisReply* e = list->element[i];
    if (e == nullptr || e->type != REDIS_REPLY_ARRAY || e->elements < std::max<std::size_t>(size, 2) ||
        (!or_more && e->elements != size)) {
      continue;
    }
    const redisReply* fields = e->element[1];
    const bool listed = fields != nullptr && fields->type == REDIS_REPLY_ARRAY;
    out.push_back({reply_text(e->element[0]), field_pairs(fields), listed, e});
  }
  return out;
}

}  // namespace pillbox::broker
