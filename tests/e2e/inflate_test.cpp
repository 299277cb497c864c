// The `inflate` handler against a gzip bomb (2 GiB of zeros in ~2 MiB):
// it must end as `oom` at the memory limit, through the cgroup OOM killer
// where the host has a memory cgroup and through RLIMIT_AS (std::bad_alloc)
// when cgroups are off; a good gzip must give back its exact bytes.
#include <dlfcn.h>
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstring>
#include <string>

#include "tests/e2e/support.h"

using e2e::run_pillbox;

namespace {

// zlib is loaded at run time: the e2e targets do not link it, and the test
// needs only deflate.
struct Zlib {
  decltype(&deflateInit2_) init2 = nullptr;
  decltype(&deflate) deflate_fn = nullptr;
  decltype(&deflateEnd) end = nullptr;
  decltype(&zlibVersion) version = nullptr;

  static const Zlib& get() {
    static const Zlib z = [] {
      Zlib z;
      void* h = ::dlopen("libz.so.1", RTLD_NOW | RTLD_LOCAL);
      REQUIRE_MESSAGE(h != nullptr, "cannot load libz.so.1: " << ::dlerror());
      z.init2 = reinterpret_cast<decltype(&deflateInit2_)>(::dlsym(h, "deflateInit2_"));
      z.deflate_fn = reinterpret_cast<decltype(&deflate)>(::dlsym(h, "deflate"));
      z.end = reinterpret_cast<decltype(&deflateEnd)>(::dlsym(h, "deflateEnd"));
      z.version = reinterpret_cast<decltype(&zlibVersion)>(::dlsym(h, "zlibVersion"));
      REQUIRE((z.init2 && z.deflate_fn && z.end && z.version));
      return z;
    }();
    return z;
  }
};

// Gzip of `total` bytes produced by `chunk(i)` calls, streamed: only one
// chunk and the compressed output are ever in memory.
template <typename ChunkFn>
std::string gzip_stream(std::size_t total, int strategy, ChunkFn chunk) {
  const Zlib& z = Zlib::get();
  z_stream zs{};
  REQUIRE(z.init2(&zs, 9, Z_DEFLATED, MAX_WBITS + 16, 9, strategy, z.version(), static_cast<int>(sizeof(z_stream))) == Z_OK);
  std::string out;
  char buf[1 << 16];
  std::size_t fed = 0;
  for (std::size_t i = 0; fed < total || fed == 0; ++i) {
    const std::string piece = chunk(i);
    const std::size_t n = std::min(piece.size(), total - fed);
    fed += n;
    const bool last = fed == total;
    zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(piece.data()));
    zs.avail_in = static_cast<uInt>(n);
    int rc;
    do {
      zs.next_out = reinterpret_cast<Bytef*>(buf);
      zs.avail_out = sizeof buf;
      rc = z.deflate_fn(&zs, last ? Z_FINISH : Z_NO_FLUSH);
      REQUIRE(rc != Z_STREAM_ERROR);
      out.append(buf, sizeof buf - zs.avail_out);
    } while (zs.avail_out == 0 || (last && rc != Z_STREAM_END));
    if (last) break;
  }
  z.end(&zs);
  return out;
}

std::string good_text() {
  std::string s;
  for (int i = 0; i < 4000; ++i) s += "line " + std::to_string(i) + ": the quick brown fox jumps over " + std::to_string(i * 7919 % 1000) + " lazy dogs\n";
  return s;
}

const std::string& bomb() {
  static const std::string b = [] {
    const std::string zeros(1 << 20, '\0');
    // Z_RLE: runs of zeros compress as well as with the default strategy, much faster.
    return gzip_stream(std::size_t{2} << 30, Z_RLE, [&](std::size_t) { return zeros; });
  }();
  return b;
}

}  // namespace

TEST_CASE("a gzip bomb is oom at the memory limit; a good gzip gives back its exact bytes") {
  e2e::TempDir dir;
  const std::string& b = bomb();
  MESSAGE("gzip bomb: 2 GiB of zeros in " << b.size() << " bytes");
  REQUIRE(b.size() < (8u << 20));  // really a bomb: over 250:1
  const std::string bomb_path = dir.write("bomb.gz", b);
  const std::string text = good_text();
  const std::string good_path = dir.write("good.gz", gzip_stream(text.size(), Z_DEFAULT_STRATEGY,
                                                                 [&](std::size_t) { return text; }));

  const auto r = run_pillbox({"run", "--json", "--handler", "inflate", "--memory", "256M", bomb_path, good_path});
  std::string message;
  long rss_kb = -1;
  {
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    REQUIRE(r.records.size() == 2);

    const auto& bad = r.record(bomb_path);
    CHECK(bad["kind"] == "oom");
    CHECK(bad["status"] == "failed");
    CHECK(bad["fingerprint"].is_string());
    message = bad["message"];
    rss_kb = bad["max_rss_kb"].get<long>();
    if (e2e::have_memory_cgroup()) CHECK_MESSAGE(message.find("cgroup OOM killer") != std::string::npos, message);
    // Bounded by the 256 MiB limit (plus the runtime's baseline), far from 2 GiB.
    CHECK(rss_kb < 400 * 1024);

    const auto& ok = r.record(good_path);
    CHECK(ok["kind"] == "ok");
    REQUIRE(ok.contains("output"));
    CHECK(ok["output"].get<std::string>() == text);
  }
  MESSAGE("bomb with cgroup " << std::string(e2e::have_memory_cgroup() ? "available" : "unavailable") << ": "
                              << message << ", max_rss_kb " << rss_kb);
  if (!e2e::have_memory_cgroup()) MESSAGE("skipped: the cgroup OOM-killer message check (no usable memory cgroup on this host)");
}

TEST_CASE("with cgroups off, the gzip bomb is still oom (RLIMIT_AS, std::bad_alloc)") {
#if defined(PILLBOX_SANITIZED)
  // The sandbox does not apply RLIMIT_AS under AddressSanitizer (its shadow
  // memory reserves terabytes of address space), so without a cgroup nothing
  // limits memory in this build.
  MESSAGE("skipped: RLIMIT_AS is not applied in the AddressSanitizer build");
  return;
#endif
  e2e::TempDir dir;
  const auto shown = run_pillbox({"policy", "show", "strict"});
  REQUIRE(shown.exit_code == 0);
  std::string policy = shown.out;
  const auto at = policy.find("cgroup = auto");
  REQUIRE_MESSAGE(at != std::string::npos, policy);
  policy.replace(at, std::strlen("cgroup = auto"), "cgroup = off");
  if (!policy.empty() && policy.back() != '\n') policy += '\n';
  const std::string policy_path = dir.write("no-cgroup.policy", policy);
  const auto check = run_pillbox({"policy", "check", policy_path});
  REQUIRE_MESSAGE(check.exit_code == 0, check.describe());

  const std::string bomb_path = dir.write("bomb.gz", bomb());
  const auto r = run_pillbox({"run", "--json", "--handler", "inflate", "--policy", policy_path, "--memory", "256M", bomb_path});
  std::string message;
  long rss_kb = -1;
  {
    INFO(r.describe());
    CHECK(r.exit_code == 1);
    REQUIRE(r.records.size() == 1);
    const auto& bad = r.records[0];
    CHECK(bad["kind"] == "oom");
    message = bad["message"];
    rss_kb = bad["max_rss_kb"].get<long>();
    CHECK(message.find("cgroup") == std::string::npos);
    CHECK_MESSAGE(message.find("alloc") != std::string::npos, message);
    CHECK(rss_kb < 400 * 1024);
  }
  MESSAGE("bomb without cgroup: " << message << ", max_rss_kb " << rss_kb);
}
