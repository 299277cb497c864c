#include "supervisor/broker/amqp_value.h"

#include <cmath>
#include <limits>
#include <unordered_map>

#include "shared/base64.h"

namespace pillbox::broker {
namespace {

std::string bytes_of(amqp_bytes_t b) { return std::string(static_cast<const char*>(b.bytes), b.len); }

AmqpValue value_from_amqp(const amqp_field_value_t& v, int depth, bool* cut) {
  AmqpValue out;
  out.kind = static_cast<char>(v.kind);
  switch (v.kind) {
    case AMQP_FIELD_KIND_BOOLEAN: out.value = v.value.boolean != 0; break;
    case AMQP_FIELD_KIND_I8: out.value = static_cast<std::int64_t>(v.value.i8); break;
    case AMQP_FIELD_KIND_I16: out.value = static_cast<std::int64_t>(v.value.i16); break;
    case AMQP_FIELD_KIND_I32: out.value = static_cast<std::int64_t>(v.value.i32); break;
    case AMQP_FIELD_KIND_I64: out.value = static_cast<std::int64_t>(v.value.i64); break;
    case AMQP_FIELD_KIND_U8: out.value = static_cast<std::uint64_t>(v.value.u8); break;
    case AMQP_FIELD_KIND_U16: out.value = static_cast<std::uint64_t>(v.value.u16); break;
    case AMQP_FIELD_KIND_U32: out.value = static_cast<std::uint64_t>(v.value.u32); break;
    case AMQP_FIELD_KIND_U64:
    case AMQP_FIELD_KIND_TIMESTAMP: out.value = static_cast<std::uint64_t>(v.value.u64); break;
    case AMQP_FIELD_KIND_F32: out.value = static_cast<double>(v.value.f32); break;
    case AMQP_FIELD_KIND_F64: out.value = v.value.f64; break;
    case AMQP_FIELD_KIND_DECIMAL: out.value = AmqpDecimal{v.value.decimal.decimals, v.value.decimal.value}; break;
    case AMQP_FIELD_KIND_UTF8:
    case AMQP_FIELD_KIND_BYTES: out.value = bytes_of(v.value.bytes); break;
    case AMQP_FIELD_KIND_ARRAY:
    case AMQP_FIELD_KIND_TABLE:
      if (depth >= kMaxAmqpDepth) {
        if (cut != nullptr) *cut = true;
        out = AmqpValue{};
        break;
      }
      if (v.kind == AMQP_FIELD_KIND_TABLE) {
        AmqpTable t;
        for (int i = 0; i < v.value.table.num_entries; ++i) {
          const amqp_table_entry_t& e = v.value.table.entries[i];
          t.push_back({bytes_of(e.key), value_from_amqp(e.value, depth + 1, cut)});
        }
        out.value = std::move(t);
      } else {
        AmqpArray a;
        for (int i = 0; i < v.value.array.num_entries; ++i) a.push_back(value_from_amqp(v.value.array.entries[i], depth + 1, cut));
        out.value = std::move(a);
      }
      break;
    default: out = AmqpValue{}; break;  // void, or a kind rabbitmq-c would not have decoded
  }
  return out;
}

}  // namespace

AmqpValue::AmqpValue() = default;
AmqpValue::AmqpValue(std::string s) : kind('S'), value(std::move(s)) {}
AmqpValue::AmqpValue(const char* s) : AmqpValue(std::string(s)) {}
AmqpValue::AmqpValue(std::int64_t i) : kind('l'), value(i) {}
AmqpValue::AmqpValue(int i) : AmqpValue(static_cast<std::int64_t>(i)) {}
AmqpValue::AmqpValue(bool b) : kind('t'), value(b) {}

AmqpValue AmqpValue::of_kind(char kind, decltype(value) v) {
  AmqpValue out;
  out.kind = kind;
  out.value = std::move(v);
  return out;
}

AmqpValue AmqpValue::timestamp(std::uint64_t seconds) { return of_kind('T', seconds); }
AmqpValue AmqpValue::table(AmqpTable fields) { return of_kind('F', std::move(fields)); }
AmqpValue AmqpValue::array(AmqpArray items) { return of_kind('A', std::move(items)); }

std::optional<std::int64_t> AmqpValue::integer() const {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&value)) {
    if (*u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return static_cast<std::int64_t>(*u);
  }
  return std::nullopt;
}

const std::string* AmqpValue::text() const { return std::get_if<std::string>(&value); }
const AmqpTable* AmqpValue::fields() const { return std::get_if<AmqpTable>(&value); }
const AmqpArray* AmqpValue::items() const { return std::get_if<AmqpArray>(&value); }

const AmqpValue* find_field(const AmqpTable& table, std::string_view name) {
  for (const AmqpField& f : table) {
    if (f.name == name) return &f.value;
  }
  return nullptr;
}

std::size_t wire_size(const AmqpValue& v) {
  if (const std::string* t = v.text()) return 5 + t->size();
  if (const AmqpArray* items = v.items()) {
    std::size_t n = 5;
    for (const AmqpValue& i : *items) n += wire_size(i);
    return n;
  }
  if (const AmqpTable* fields = v.fields()) {
    std::size_t n = 5;
    for (const AmqpField& f : *fields) n += 1 + f.name.size() + wire_size(f.value);
    return n;
  }
  return 9;
}
std::size_t wire_size(const AmqpField& f) { return 1 + f.name.size() + wire_size(f.value); }

std::string decimal_text(const AmqpDecimal& d) {
  std::string digits = std::to_string(d.value);
  if (d.decimals == 0) return digits;
  if (digits.size() <= d.decimals) digits.insert(0, d.decimals - digits.size() + 1, '0');
  digits.insert(digits.size() - d.decimals, ".");
  return digits;
}

AmqpTable table_from_amqp(const amqp_table_t& table, bool* cut) {
  amqp_field_value_t v{};
  v.kind = AMQP_FIELD_KIND_TABLE;
  v.value.table = table;
  AmqpValue t = value_from_amqp(v, 0, cut);
  return std::move(std::get<AmqpTable>(t.value));
}

amqp_field_value_t AmqpTableEncoder::encode_value(const AmqpValue& v) {
  amqp_field_value_t out{};
  out.kind = static_cast<std::uint8_t>(v.kind);
  auto as_bytes = [](const std::string& s) { return amqp_bytes_t{s.size(), const_cast<char*>(s.data())}; };
  switch (v.kind) {
    case 't': out.value.boolean = std::get<bool>(v.value) ? 1 : 0; break;
    case 'b': out.value.i8 = static_cast<std::int8_t>(std::get<std::int64_t>(v.value)); break;
    case 's': out.value.i16 = static_cast<std::int16_t>(std::get<std::int64_t>(v.value)); break;
    case 'I': out.value.i32 = static_cast<std::int32_t>(std::get<std::int64_t>(v.value)); break;
    case 'l': out.value.i64 = std::get<std::int64_t>(v.value); break;
    case 'B': out.value.u8 = static_cast<std::uint8_t>(std::get<std::uint64_t>(v.value)); break;
    case 'u': out.value.u16 = static_cast<std::uint16_t>(std::get<std::uint64_t>(v.value)); break;
    case 'i': out.value.u32 = static_cast<std::uint32_t>(std::get<std::uint64_t>(v.value)); break;
    case 'L':
    case 'T': out.value.u64 = std::get<std::uint64_t>(v.value); break;
    case 'f': out.value.f32 = static_cast<float>(std::get<double>(v.value)); break;
    case 'd': out.value.f64 = std::get<double>(v.value); break;
    case 'D': out.value.decimal = {std::get<AmqpDecimal>(v.value).decimals, std::get<AmqpDecimal>(v.value).value}; break;
    case 'S':
    case 'x': out.value.bytes = as_bytes(std::get<std::string>(v.value)); break;
    case 'F': out.value.table = encode(std::get<AmqpTable>(v.value)); break;
    case 'A': {
      auto& items = items_.emplace_back();
      for (const AmqpValue& item : std::get<AmqpArray>(v.value)) items.push_back(encode_value(item));
      out.value.array = amqp_array_t{static_cast<int>(items.size()), items.empty() ? nullptr : items.data()};
      break;
    }
    default: out.kind = AMQP_FIELD_KIND_VOID; break;
  }
  return out;
}

amqp_table_t AmqpTableEncoder::encode(const AmqpTable& table) {
  // Each level's entries in a vector of their own, filled before its
  // address is taken (a deque keeps the addresses of those made before).
  std::vector<amqp_table_entry_t> filled;
  filled.reserve(table.size());
  for (const AmqpField& f : table) {
    amqp_table_entry_t e{};
    e.key = amqp_bytes_t{f.name.size(), const_cast<char*>(f.name.data())};
    e.value = encode_value(f.value);
    filled.push_back(e);
  }
  auto& entries = entries_.emplace_back(std::move(filled));
  return amqp_table_t{static_cast<int>(entries.size()), entries.empty() ? nullptr : entries.data()};
}

nlohmann::json to_json(const AmqpValue& v) {
  switch (v.kind) {
    case 'V': return nullptr;
    case 't': return std::get<bool>(v.value);
    case 'b': case 's': case 'I': case 'l': return std::get<std::int64_t>(v.value);
    case 'B': case 'u': case 'i': case 'L': return std::get<std::uint64_t>(v.value);
    case 'T': return {{"timestamp", std::get<std::uint64_t>(v.value)}};
    case 'f': case 'd': {
      const double d = std::get<double>(v.value);
      if (std::isfinite(d)) return d;
      return std::isnan(d) ? "nan" : (d > 0 ? "inf" : "-inf");
    }
    case 'D': return {{"decimal", std::get<AmqpDecimal>(v.value).value}, {"decimals", std::get<AmqpDecimal>(v.value).decimals}};
    case 'S': case 'x': {
      const std::string& s = std::get<std::string>(v.value);
      if (v.kind == 'S' && is_valid_utf8(s)) return s;
      return {{"bytes_b64", base64_encode(s)}};
    }
    case 'A': {
      nlohmann::json a = nlohmann::json::array();
      for (const AmqpValue& item : std::get<AmqpArray>(v.value)) a.push_back(to_json(item));
      return a;
    }
    case 'F': return to_json(std::get<AmqpTable>(v.value));
    default: return nullptr;
  }
}

nlohmann::json to_json(const AmqpTable& table) {
  nlohmann::json o = nlohmann::json::object();
  // The next number to try for each name shown: a header of 65,000 fields
  // of one name (what a frame holds) takes one pass, not 65,000 each.
  std::unordered_map<std::string, int> next;
  for (const AmqpField& f : table) {
    const std::string base = is_valid_utf8(f.name) ? f.name : "bytes:" + base64_encode(f.name);
    std::string name = base;
    for (int& n = next.try_emplace(base, 2).first->second; o.contains(name); ++n) {
      name = base + " (" + std::to_string(n) + ")";
    }
    o[name] = to_json(f.value);
  }
  return o;
}

}  // namespace pillbox::broker
