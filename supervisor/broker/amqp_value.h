#pragma once
// The values of AMQP 0-9-1 field tables (a message's headers, RabbitMQ's
// x-death, a queue's x-arguments) as pillbox holds them: each with its wire
// type, so that a dead letter carries a message's headers on type for type,
// and shown as JSON for an operator. Converted from and to rabbitmq-c's
// tables here (amqp_connection.cpp is the only user of those).
//
// What a broker or a publisher put in a table is a claim: nesting deeper
// than kMaxAmqpDepth is cut (the value becomes void and the table says so),
// and the readers below take only the types they expect.
#include <amqp.h>

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace pillbox::broker {

struct AmqpValue;
struct AmqpField;
using AmqpArray = std::vector<AmqpValue>;
using AmqpTable = std::vector<AmqpField>;  // in the order sent; a name may repeat

struct AmqpDecimal {
  std::uint8_t decimals = 0;
  std::uint32_t value = 0;
  bool operator==(const AmqpDecimal&) const = default;
};

struct AmqpValue {
  // The wire type (AMQP_FIELD_KIND_*): 't' bool; 'b' 's' 'I' 'l' signed and
  // 'B' 'u' 'i' 'L' unsigned integers; 'T' a timestamp (seconds, unsigned);
  // 'f' 'd' floats; 'D' decimal; 'S' long string, 'x' byte array (any
  // bytes); 'A' array; 'F' table; 'V' void.
  char kind = 'V';
  std::variant<std::monostate, bool, std::int64_t, std::uint64_t, double, std::string, AmqpDecimal, AmqpArray,
               AmqpTable>
      value;

  // (Defined where AmqpField is complete: clang instantiates the variant's
  // destructor here.)
  AmqpValue();
  AmqpValue(std::string s);
  AmqpValue(const char* s);
  AmqpValue(std::int64_t i);
  AmqpValue(int i);
  AmqpValue(bool b);
  // A value of wire type `kind` holding `v`, which must be the alternative
  // the kind says (above).
  static AmqpValue of_kind(char kind, decltype(value) v);
  static AmqpValue timestamp(std::uint64_t seconds);
  static AmqpValue table(AmqpTable fields);
  static AmqpValue array(AmqpArray items);

  // The value of any integer kind (timestamps included) that fits an
  // int64; nullopt for other kinds and larger unsigned values.
  std::optional<std::int64_t> integer() const;
  // A string's bytes ('S' or 'x'); nullopt for other kinds.
  const std::string* text() const;
  const AmqpTable* fields() const;
  const AmqpArray* items() const;

  bool operator==(const AmqpValue&) const = default;  // same kind and value, recursively
};

struct AmqpField {
  std::string name;
  AmqpValue value;
  bool operator==(const AmqpField&) const = default;
};

// The first field named `name`, or none.
const AmqpValue* find_field(const AmqpTable& table, std::string_view name);

// The bytes a value takes in an AMQP field table, at most (a scalar: 9),
// and a field with its name.
std::size_t wire_size(const AmqpValue& v);
std::size_t wire_size(const AmqpField& f);

// A decimal as text: 12345 with 2 decimals -> "123.45".
std::string decimal_text(const AmqpDecimal& d);

// Nesting deeper than this (tables and arrays) is cut.
inline constexpr int kMaxAmqpDepth = 16;

// rabbitmq-c's table as pillbox's. `cut`: set when something was nested
// deeper than kMaxAmqpDepth (left out, as void).
AmqpTable table_from_amqp(const amqp_table_t& table, bool* cut = nullptr);

// Pillbox's tables as rabbitmq-c's, valid as long as the encoder lives and
// the tables given to it are not changed.
class AmqpTableEncoder {
 public:
  amqp_table_t encode(const AmqpTable& table);

 private:
  amqp_field_value_t encode_value(const AmqpValue& value);
  std::deque<std::vector<amqp_table_entry_t>> entries_;
  std::deque<std::vector<amqp_field_value_t>> items_;
};

// As an operator reads it: an object of the fields (a repeated name as
// "NAME (2)", ...); strings that are UTF-8 as strings, other bytes as
// {"bytes_b64": ...}; integers and floats as numbers (not finite: as a
// string); a timestamp as {"timestamp": seconds}; a decimal as
// {"decimal": value, "decimals": n}; void as null.
nlohmann::json to_json(const AmqpTable& table);
nlohmann::json to_json(const AmqpValue& value);

}  // namespace pillbox::broker
