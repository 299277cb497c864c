#pragma once
// SHA-256 (FIPS 180-4). Used for fingerprints, policy identities and content
// addressing of payloads.
#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace pillbox {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t len);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::array<std::uint8_t, 32> finish();

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(std::string_view data);
// A digest (Sha256::finish) as 64 lowercase hex digits, as sha256_hex gives.
std::string digest_hex(const std::array<std::uint8_t, 32>& digest);

}  // namespace pillbox
