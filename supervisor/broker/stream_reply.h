#pragma once
// Stream entries as Redis's replies hold them (XRANGE, XREVRANGE, XREAD,
// XREADGROUP and the scripts that return entries): {id, {name, value, ...},
// ...}, the fields in order, a repeated name included. Pure: no commands.
#include <hiredis/hiredis.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace pillbox::broker {

using EntryFields = std::vector<std::pair<std::string, std::string>>;

// The value of field `name` (the first, when repeated), or nullptr.
const std::string* entry_field(const EntryFields& fields, std::string_view name);
std::string* entry_field(EntryFields& fields, std::string_view name);
// Its value, or "".
std::string field_or_empty(const EntryFields& fields, std::string_view name);

// The name/value pairs of a flat array reply; none when it is not an array.
EntryFields field_pairs(const redisReply* r);

struct StreamEntry {
  std::string id;
  EntryFields fields;
  bool fields_listed = false;  // its fields element is an array (else `fields` is empty)
  const redisReply* reply = nullptr;  // the whole element (what a script adds after the fields); `list` owns it
};
// The elements of `list` that are arrays of `size` (at least 2) elements, or
// of `size` or more with `or_more`; none when it is not an array. Callers
// differ in what they tolerate of a malformed reply, so each says it.
std::vector<StreamEntry> stream_entries(const redisReply* list, std::size_t size, bool or_more = false);

}  // namespace pillbox::broker
