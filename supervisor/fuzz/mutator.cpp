#include "supervisor/fuzz/mutator.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

// The design follows AFL's havoc stage and libFuzzer's MutationDispatcher:
// a stack of 1 << uniform(0..4) operations, each one drawn (by weight) among
// the operations that can apply to the bytes as they are at that point.
// Every operation is a small function below; the table `kOps` at the end
// gives their names (what `how` reports), weights and preconditions.
//
// Randomness comes only from the Mutator's mt19937_64, and only through
// `Work::below` (a plain modulo of the raw 64-bit output) rather than
// std::uniform_int_distribution, whose algorithm differs between standard
// libraries: the same seed gives the same candidates with libstdc++ or libc++.

namespace pillbox::fuzz {
namespace {

// AFL's "interesting" values: boundaries where off-by-one, sign and
// width-truncation bugs live. As in AFL, a 2-byte write draws from the 8- and
// 16-bit lists and a 4-byte write from all three (a 0 or -1 in a wide field is
// as interesting as in a byte).
constexpr std::array<std::int32_t, 9> kInteresting8 = {-128, -1, 0, 1, 16, 32, 64, 100, 127};
constexpr std::array<std::int32_t, 10> kInteresting16 = {-32768, -129, 128,  255,  256,
                                                         512,    1000, 1024, 4096, 32767};
constexpr std::array<std::int32_t, 8> kInteresting32 = {
    -2147483647 - 1, -100663046, -32769, 32768, 65535, 65536, 100663045, 2147483647};

// AFL's ARITH_MAX: small deltas find length/counter fields that are off by a little.
constexpr std::uint32_t kArithMax = 35;
// Longest run insert-repeated adds (libFuzzer's InsertRepeatedBytes uses ~128 too).
constexpr std::size_t kMaxRepeat = 128;
// Longest run of fresh random bytes insert-random adds.
constexpr std::size_t kMaxRandomInsert = 32;

// The state of one mutate() call: the bytes being mutated and what the
// operations may draw from.
struct Work {
  std::mt19937_64& rng;
  const std::vector<std::string>& dictionary;
  std::string_view other;
  std::size_t max_len;
  std::string data;

  // Uniform in [0, n); n > 0. The modulo bias is below 2^-50 for any size we handle.
  std::size_t below(std::size_t n) { return static_cast<std::size_t>(rng() % n); }
  bool coin() { return (rng() & 1) != 0; }
  // How many bytes an insertion may add before reaching max_len.
  std::size_t room() const { return data.size() < max_len ? max_len - data.size() : 0; }

  // A block length in [1, limit] (limit >= 1), biased to small blocks like
  // AFL's choose_block_len: most structure is a few bytes long, and small
  // edits stay close to an input that reaches deep code. Now and then any
  // length, so large moves (doubling an input) still happen.
  std::size_t block_len(std::size_t limit) {
    const std::size_t r = below(10);
    const std::size_t cap = r < 6 ? 8 : r < 9 ? 64 : limit;
    return 1 + below(std::min(cap, limit));
  }
};

// Integers of 1, 2 or 4 bytes at `pos`, in either byte order: file formats
// and protocols use both.
std::uint32_t load(const std::string& d, std::size_t pos, std::size_t width, bool big_endian) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < width; ++i) {
    const auto byte = static_cast<std::uint32_t>(static_cast<unsigned char>(d[pos + i]));
    v |= byte << (8 * (big_endian ? width - 1 - i : i));
  }
  return v;
}

void store(std::string& d, std::size_t pos, std::size_t width, bool big_endian, std::uint32_t v) {
  for (std::size_t i = 0; i < width; ++i) {
    const std::size_t shift = 8 * (big_endian ? width - 1 - i : i);
    d[pos + i] = static_cast<char>((v >> shift) & 0xff);
  }
}

// --- operations; each returns false if it could not apply (then another is drawn)

bool flip_bit(Work& w) {
  w.data[w.below(w.data.size())] ^= static_cast<char>(1u << w.below(8));
  return true;
}

bool flip_byte(Work& w) {
  w.data[w.below(w.data.size())] ^= static_cast<char>(0xff);
  return true;
}

// XOR with 1..255 rather than assigning a random byte: the byte always
// changes, so no execution is spent on a write that did nothing.
bool random_byte(Work& w) {
  w.data[w.below(w.data.size())] ^= static_cast<char>(1 + w.below(255));
  return true;
}

template <std::size_t Width>
bool interesting(Work& w) {
  // Candidates for this width: the lists up to it, as AFL does.
  std::size_t count = kInteresting8.size();
  if constexpr (Width >= 2) count += kInteresting16.size();
  if constexpr (Width >= 4) count += kInteresting32.size();
  std::size_t pick = w.below(count);
  std::int32_t value;
  if (pick < kInteresting8.size()) {
    value = kInteresting8[pick];
  } else if ((pick -= kInteresting8.size()) < kInteresting16.size()) {
    value = kInteresting16[pick];
  } else {
    value = kInteresting32[pick - kInteresting16.size()];
  }
  const std::size_t pos = w.below(w.data.size() - Width + 1);
  const bool big_endian = Width > 1 && w.coin();
  // Two's complement truncated to the width: -1 is ff, ffff or ffffffff.
  store(w.data, pos, Width, big_endian, static_cast<std::uint32_t>(value));
  return true;
}

template <std::size_t Width>
bool arith(Work& w) {
  const std::size_t pos = w.below(w.data.size() - Width + 1);
  const bool big_endian = Width > 1 && w.coin();
  const auto delta = static_cast<std::uint32_t>(1 + w.below(kArithMax));
  std::uint32_t v = load(w.data, pos, Width, big_endian);
  v = w.coin() ? v + delta : v - delta;  // unsigned: wraps, as the field would
  store(w.data, pos, Width, big_endian, v);
  return true;
}

// Never deletes everything: an empty candidate tells little and the inserts
// would have to rebuild from nothing.
bool delete_block(Work& w) {
  const std::size_t len = w.block_len(w.data.size() - 1);
  w.data.erase(w.below(w.data.size() - len + 1), len);
  return true;
}

// Copies a block of the input and inserts it elsewhere. Repeated across
// generations this is what grows "aaaa" into a long run, or one record of a
// list into many: the way to reach length-dependent bugs (fixed buffers,
// nesting depth) without knowing the format.
bool duplicate_block(Work& w) {
  const std::size_t len = w.block_len(std::min(w.data.size(), w.room()));
  const std::string block = w.data.substr(w.below(w.data.size() - len + 1), len);
  w.data.insert(w.below(w.data.size() + 1), block);
  return true;
}

// A run of one byte: half the time a byte already in the input (extends a
// run of 'a's, a padding, a field of spaces), else any byte.
bool insert_repeated(Work& w) {
  const std::size_t count = 1 + w.below(std::min(kMaxRepeat, w.room()));
  const char byte = !w.data.empty() && w.coin() ? w.data[w.below(w.data.size())]
                                                : static_cast<char>(w.below(256));
  w.data.insert(w.below(w.data.size() + 1), count, byte);
  return true;
}

bool insert_random(Work& w) {
  const std::size_t count = w.block_len(std::min(kMaxRandomInsert, w.room()));
  std::string bytes(count, '\0');
  for (char& c : bytes) c = static_cast<char>(w.below(256));
  w.data.insert(w.below(w.data.size() + 1), bytes);
  return true;
}

// Copies a block over another place of the same input (size unchanged):
// moves a field, repeats a header value where a length was.
bool overwrite_copy(Work& w) {
  const std::size_t size = w.data.size();
  const std::size_t len = w.block_len(size - 1);  // < size: src and dst can differ
  const std::size_t src = w.below(size - len + 1);
  std::size_t dst = w.below(size - len);
  if (dst >= src) ++dst;
  const std::string block = w.data.substr(src, len);
  w.data.replace(dst, len, block);
  return true;
}

// Head of the input + tail of the other entry, cut at independent points:
// combines what two corpus entries each reached. The tail is never empty, so
// the other entry always contributes.
bool splice_cut(Work& w) {
  const std::size_t head = w.below(std::min(w.data.size(), w.max_len - 1) + 1);
  const std::size_t tail = w.below(w.other.size());
  w.data.resize(head);
  w.data.append(w.other.substr(tail, w.max_len - head));
  return true;
}

// A block of the other entry inserted into the input.
bool splice_insert(Work& w) {
  const std::size_t len = w.block_len(std::min(w.other.size(), w.room()));
  const std::string_view block = w.other.substr(w.below(w.other.size() - len + 1), len);
  w.data.insert(w.below(w.data.size() + 1), block);
  return true;
}

// Dictionary tokens (magic numbers, keywords) are what blind byte edits
// almost never assemble by chance.
bool dict_insert(Work& w) {
  const std::string& token = w.dictionary[w.below(w.dictionary.size())];
  if (token.size() > w.room()) return false;
  w.data.insert(w.below(w.data.size() + 1), token);
  return true;
}

// Overwrites at any offset of the input, growing it when the token runs
// past the end (a magic written near the end of a short seed still lands whole).
bool dict_overwrite(Work& w) {
  const std::string& token = w.dictionary[w.below(w.dictionary.size())];
  if (token.size() > w.max_len) return false;
  const std::size_t pos = std::min(w.below(w.data.size()), w.max_len - token.size());
  if (pos + token.size() > w.data.size()) w.data.resize(pos + token.size());
  w.data.replace(pos, token.size(), token);
  return true;
}

// --- preconditions

template <std::size_t N>
bool has_bytes(const Work& w) {
  return w.data.size() >= N;
}
bool has_room(const Work& w) { return w.room() > 0; }
bool can_duplicate(const Work& w) { return !w.data.empty() && w.room() > 0; }
bool can_splice_cut(const Work& w) { return !w.other.empty() && !w.data.empty(); }
bool can_splice_insert(const Work& w) { return !w.other.empty() && w.room() > 0; }
bool can_dict_insert(const Work& w) { return !w.dictionary.empty() && w.room() > 0; }
bool can_dict_overwrite(const Work& w) { return !w.dictionary.empty() && !w.data.empty(); }

struct Op {
  const char* name;
  // Relative chance among the operations that apply. Roughly AFL's havoc
  // mix: delete-block weighs more than any single insertion (AFL gives it two
  // havoc cases for this reason) so that candidates shrink as well as grow
  // (from a 64-byte input they average ~74 bytes); the dictionary ops weigh
  // enough that a token lands at offset 0 of an 11-byte seed in a median of
  // ~21 candidates.
  unsigned weight;
  bool (*applies)(const Work&);
  bool (*apply)(Work&);
};

constexpr Op kOps[] = {
    {"flip-bit", 2, has_bytes<1>, flip_bit},
    {"flip-byte", 1, has_bytes<1>, flip_byte},
    {"random-byte", 2, has_bytes<1>, random_byte},
    {"interesting-8", 1, has_bytes<1>, interesting<1>},
    {"interesting-16", 1, has_bytes<2>, interesting<2>},
    {"interesting-32", 1, has_bytes<4>, interesting<4>},
    {"arith-8", 1, has_bytes<1>, arith<1>},
    {"arith-16", 1, has_bytes<2>, arith<2>},
    {"arith-32", 1, has_bytes<4>, arith<4>},
    {"delete-block", 3, has_bytes<2>, delete_block},
    {"duplicate-block", 2, can_duplicate, duplicate_block},
    {"insert-repeated", 1, has_room, insert_repeated},
    {"insert-random", 1, has_room, insert_random},
    {"overwrite-copy", 1, has_bytes<2>, overwrite_copy},
    {"splice-cut", 1, can_splice_cut, splice_cut},
    {"splice-insert", 1, can_splice_insert, splice_insert},
    {"dict-insert", 2, can_dict_insert, dict_insert},
    {"dict-overwrite", 2, can_dict_overwrite, dict_overwrite},
};
constexpr std::size_t kOpCount = std::size(kOps);

// Applies one operation drawn by weight among those that apply, and returns
// it; one that declines is set aside and another drawn. Some operation
// always applies while max_len >= 1, so null is only a safety net.
const Op* apply_one(Work& w) {
  std::array<bool, kOpCount> candidate{};
  for (std::size_t i = 0; i < kOpCount; ++i) candidate[i] = kOps[i].applies(w);
  for (;;) {
    unsigned total = 0;
    for (std::size_t i = 0; i < kOpCount; ++i) total += candidate[i] ? kOps[i].weight : 0;
    if (total == 0) return nullptr;
    auto pick = static_cast<unsigned>(w.below(total));
    std::size_t i = 0;
    for (;; ++i) {
      if (!candidate[i]) continue;
      if (pick < kOps[i].weight) break;
      pick -= kOps[i].weight;
    }
    if (kOps[i].apply(w)) return &kOps[i];
    candidate[i] = false;
  }
}

std::vector<std::string> without_empty(std::vector<std::string> tokens) {
  // An empty token would make dict-insert a no-op that still counts as a mutation.
  std::erase_if(tokens, [](const std::string& t) { return t.empty(); });
  return tokens;
}

}  // namespace

Mutator::Mutator(std::uint64_t seed, std::vector<std::string> dictionary, std::size_t max_len)
    : rng_(seed), dictionary_(without_empty(std::move(dictionary))), max_len_(std::max<std::size_t>(max_len, 1)) {}

std::string Mutator::mutate(std::string_view input, std::string_view other, std::string* how) {
  // An input longer than max_len (a seed, a lowered --max-len) is cut first.
  Work w{rng_, dictionary_, other, max_len_, std::string(input.substr(0, max_len_))};
  if (how != nullptr) how->clear();
  const std::size_t depth = std::size_t{1} << w.below(5);  // 1, 2, 4, 8 or 16, as AFL
  for (std::size_t i = 0; i < depth; ++i) {
    const Op* op = apply_one(w);
    if (op != nullptr && how != nullptr) {
      if (!how->empty()) how->push_back(',');
      how->append(op->name);
    }
  }
  // The operations respect max_len already; this only guards the invariant.
  if (w.data.size() > max_len_) w.data.resize(max_len_);
  return std::move(w.data);
}

}  // namespace pillbox::fuzz
