#include "shared/fingerprint.h"

#include <doctest/doctest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "shared/raise_site.h"
#include "supervisor/ops/quarantine_views_json.h"
#include "supervisor/ops/raise_site_rollup.h"

namespace pillbox {
namespace {

SymbolizedFrame fn(std::string function, std::string module = "/opt/app/bin/worker",
                   std::uint64_t offset = 0x1000) {
  return SymbolizedFrame{std::move(module), offset, std::move(function)};
}

TEST_CASE("normalize_function: plain C names pass through") {
  CHECK(normalize_function("parse_header") == "parse_header");
  CHECK(normalize_function("main") == "main");
  CHECK(normalize_function("") == "");
}

TEST_CASE("normalize_function: templates and parameter lists") {
  CHECK(normalize_function("std::vector<int, std::allocator<int> >::at(unsigned long) const") ==
        "std::vector::at");
  CHECK(normalize_function("ns::Parser<char>::parse(char const*, unsigned long) &&") == "ns::Parser::parse");
  CHECK(normalize_function("ns::f(int) noexcept") == "ns::f");
  CHECK(normalize_function("ns::g() volatile &") == "ns::g");
  CHECK(normalize_function("std::_Function_handler<void (int), main::{lambda(int)#1}>::_M_invoke("
                           "std::_Any_data const&, int&&)") == "std::_Function_handler::_M_invoke");
  // Expressions inside template arguments are parenthesized by the demangler.
  CHECK(normalize_function("Fixed<((3)>(2))>::get()") == "Fixed::get");
  // Function templates carry their return type.
  CHECK(normalize_function("void ns::visit<Node>(Node&)") == "ns::visit");
  CHECK(normalize_function("unsigned long count<char>(char const*)") == "count");
  CHECK(normalize_function("std::basic_string<char, std::char_traits<char>, std::allocator<char> > const& "
                           "pick<std::string>(std::string const&)") == "pick");
  // Local entities: the enclosing function's parameters go, the scope stays.
  CHECK(normalize_function("outer(int)::Local::run() const") == "outer::Local::run");
}

TEST_CASE("normalize_function: operators") {
  CHECK(normalize_function("bool operator< <int>(Box<int> const&, Box<int> const&)") == "operator<");
  CHECK(normalize_function("Box<int>::operator<(Box<int> const&) const") == "Box::operator<");
  CHECK(normalize_function("std::basic_ostream<char, std::char_traits<char> >& std::operator<< "
                           "<std::char_traits<char> >(std::basic_ostream<char, std::char_traits<char> >&, "
                           "char const*)") == "std::operator<<");
  CHECK(normalize_function("Ptr<Node>::operator->() const") == "Ptr::operator->");
  CHECK(normalize_function("Ptr<Node>::operator->*(int Node::*)") == "Ptr::operator->*");
  CHECK(normalize_function("Version::operator<=>(Version const&) const") == "Version::operator<=>");
  CHECK(normalize_function("Bits::operator>>=(int)") == "Bits::operator>>=");
  CHECK(normalize_function("Matrix::operator()(int, int)") == "Matrix::operator()");
  CHECK(normalize_function("Table<int>::operator[](unsigned long)") == "Table::operator[]");
  CHECK(normalize_function("operator new(unsigned long)") == "operator new");
  CHECK(normalize_function("operator delete[](void*, unsigned long)") == "operator delete[]");
  CHECK(normalize_function("Handle::operator bool() const") == "Handle::operator bool");
  CHECK(normalize_function("Id::operator unsigned long() const") == "Id::operator unsigned long");
  CHECK(normalize_function("Doc::operator std::vector<int, std::allocator<int> >() const") ==
        "Doc::operator std::vector");
}

TEST_CASE("normalize_function: lambdas, anonymous namespaces, ABI tags, clones") {
  CHECK(normalize_function("main::{lambda(int)#2}::operator()(int) const") == "main::{lambda}::operator()");
  CHECK(normalize_function("run(std::vector<int, std::allocator<int> >&)::{lambda(std::vector<int, "
                           "std::allocator<int> > const&)#1}::operator()(std::vector<int, "
                           "std::allocator<int> > const&) const") == "run::{lambda}::operator()");
  CHECK(normalize_function("Widget::{unnamed type#1}::reset()") == "Widget::{unnamed type}::reset");
  CHECK(normalize_function("(anonymous namespace)::decode_block(unsigned char const*)") ==
        "(anonymous namespace)::decode_block");
  CHECK(normalize_function("pillbox::(anonymous namespace)::Cache<int>::get(int)") ==
        "pillbox::(anonymous namespace)::Cache::get");
  CHECK(normalize_function("name[abi:cxx11](Person const&)") == "name");
  CHECK(normalize_function("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > "
                           "describe[abi:cxx11]<int>(int)") == "describe");
  CHECK(normalize_function("inflate_block(z_stream*) [clone .cold]") == "inflate_block");
  CHECK(normalize_function("ns::f(int) [clone .isra.0] [clone .cold]") == "ns::f");
  CHECK(normalize_function("parse_header.cold") == "parse_header");
  CHECK(normalize_function("parse_header.isra.0") == "parse_header");
  CHECK(normalize_function("parse_header.constprop.0") == "parse_header");
}

TEST_CASE("normalize_function: malformed names do not break it") {
  CHECK(normalize_function("broken<int") == "broken");
  CHECK(normalize_function("broken(int") == "broken");
  CHECK(normalize_function("x::{lambda(") == "x::{lambda}");
  CHECK(normalize_function("operator") == "operator");
  CHECK(normalize_function("a::operator ") == "a::operator");
  CHECK(normalize_function(">>)}]") == ">>)}]");
}

TEST_CASE("is_ignored_frame: runtime modules") {
  CHECK(is_ignored_frame(fn("", "/lib/x86_64-linux-gnu/libc.so.6")));
  CHECK(is_ignored_frame(fn("whatever", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6")));
  CHECK(is_ignored_frame(fn("", "/lib/x86_64-linux-gnu/libgcc_s.so.1")));
  CHECK(is_ignored_frame(fn("", "/lib64/ld-linux-x86-64.so.2")));
  CHECK(is_ignored_frame(fn("", "/lib/x86_64-linux-gnu/libm.so.6")));
  CHECK(is_ignored_frame(fn("", "/lib/x86_64-linux-gnu/libpthread.so.0")));
  CHECK(is_ignored_frame(fn("", "/opt/pillbox/lib/libpillbox-crash.so")));
  CHECK(is_ignored_frame(fn("", "/usr/lib/x86_64-linux-gnu/libasan.so.8")));
  CHECK(is_ignored_frame(fn("", "/usr/lib/x86_64-linux-gnu/libubsan.so.1")));
  CHECK_FALSE(is_ignored_frame(fn("", "/usr/lib/x86_64-linux-gnu/libpoppler.so.126")));
  CHECK_FALSE(is_ignored_frame(fn("", "/usr/lib/libcrypto.so.3")));
  CHECK_FALSE(is_ignored_frame(fn("", "")));
}

TEST_CASE("is_ignored_frame: function names") {
  for (const char* name :
       {"abort", "raise", "gsignal", "__GI_raise", "__GI___pthread_kill", "__libc_message",
        "__pthread_kill_implementation", "pthread_kill", "__assert_fail", "__assert_perror_fail",
        "malloc", "calloc", "realloc", "free", "operator new(unsigned long)",
        "operator delete(void*, unsigned long)", "operator new[](unsigned long)", "__cxa_throw",
        "__cxa_rethrow", "std::terminate()", "__gnu_cxx::__verbose_terminate_handler()",
        "_Unwind_Resume", "__sanitizer::Die()", "__asan_report_load8", "__ubsan_handle_builtin_unreachable",
        "_start", "__libc_start_main", "__libc_start_call_main",
        "pillbox::sandbox::run_handler(pillbox::Task const&)",
        "pillbox::crash::on_fatal_signal(int, siginfo_t*, void*)"}) {
    CAPTURE(name);
    CHECK(is_ignored_frame(fn(name)));
  }
  for (const char* name : {"main", "parse_header", "pillbox::handlers::inflate(std::string_view)",
                           "std::vector<int, std::allocator<int> >::at(unsigned long)", "freeform",
                           "raise_error(int)", "my_malloc_wrapper"}) {
    CAPTURE(name);
    CHECK_FALSE(is_ignored_frame(fn(name)));
  }
}

TEST_CASE("crash_state: drops ignored frames and keeps three") {
  const std::vector<SymbolizedFrame> frames = {
      fn("__pthread_kill_implementation", "/lib/x86_64-linux-gnu/libc.so.6"),
      fn("raise", "/lib/x86_64-linux-gnu/libc.so.6"),
      fn("abort", "/lib/x86_64-linux-gnu/libc.so.6"),
      fn("pillbox::crash::on_fatal_signal(int)"),
      fn("Decoder<char>::read_chunk(unsigned long) const"),
      fn("", "/opt/app/lib/libthird.so", 0x4f2a),
      fn("", "", 0x7f00dead),
      fn("main"),
  };
  CHECK(crash_state(frames) ==
        std::vector<std::string>{"Decoder::read_chunk", "libthird.so+0x4f2a", "0x7f00dead"});
  CHECK(crash_state(frames, 1) == std::vector<std::string>{"Decoder::read_chunk"});
  CHECK(crash_state(frames, 5) == std::vector<std::string>{"Decoder::read_chunk", "libthird.so+0x4f2a",
                                                           "0x7f00dead", "main"});
  CHECK(crash_state({}).empty());
  // A symbol that normalizes to nothing is named by its address instead.
  CHECK(crash_state({fn("<int>", "/bin/app", 0x10)}) == std::vector<std::string>{"app+0x10"});
}

TEST_CASE("crash_state: falls back to the top frames when all are ignored") {
  const std::vector<SymbolizedFrame> frames = {
      fn("", "/lib/x86_64-linux-gnu/libc.so.6", 0x3bfa0),
      fn("abort(void) [clone .cold]"),
      fn("__libc_start_main"),
      fn("_start"),
  };
  CHECK(crash_state(frames) == std::vector<std::string>{"libc.so.6+0x3bfa0", "abort", "__libc_start_main"});
}

TEST_CASE("frames_recurse") {
  // A crash report carries at most 64 frames; an overflow always fills them.
  std::vector<SymbolizedFrame> frames;
  auto repeat_until_full = [&](std::initializer_list<const char*> cycle) {
    while (frames.size() < 64) {
      for (const char* name : cycle) frames.push_back(fn(name));
    }
  };
  SUBCASE("one function recursing, under the frame where the stack ran out") {
    frames.push_back(fn("crash_site"));
    for (int i = 0; i < 70; ++i) frames.push_back(fn("walk(Node*)", "/bin/w", 0x100 + i));
    CHECK(frames_recurse(frames));
  }
  SUBCASE("a cycle of three, after some non-recursive frames") {
    frames.push_back(fn("memcpy"));
    frames.push_back(fn("grow"));
    repeat_until_full({"parse_value(Ctx&)", "parse_array(Ctx&)", "parse_list<int>(Ctx&)"});
    CHECK(frames_recurse(frames));
  }
  SUBCASE("unsymbolized frames at the same return address recurse too") {
    for (int i = 0; i < 64; ++i) frames.push_back(fn("", "/opt/libx.so", 0x77));
    CHECK(frames_recurse(frames));
  }
  SUBCASE("a cycle of six, like libstdc++'s regex executor, is found") {
    repeat_until_full({"dfs", "dfs", "dfs", "rep_once_more", "dfs", "dfs"});
    CHECK(frames_recurse(frames));
  }
  SUBCASE("a cycle of eleven, the regex executor in a debug build, is found") {
    for (const char* helper : {"access", "access", "invoke", "matches", "handle_match"}) frames.push_back(fn(helper));
    repeat_until_full({"dfs", "alt", "dfs", "sub_begin", "dfs", "rep_once_more", "repeat", "dfs", "sub_end", "dfs",
                       "match"});
    CHECK(frames_recurse(frames));
  }
  SUBCASE("a cycle of seventeen is too long") {
    for (int i = 0; i < 4; ++i) {
      for (int k = 0; k < 17; ++k) frames.push_back(fn("f" + std::to_string(k)));
    }
    CHECK_FALSE(frames_recurse(frames));
  }
  SUBCASE("a crash a few levels down a recursive walk is not an overflow") {
    frames.push_back(fn("visit_leaf"));
    for (int i = 0; i < 12; ++i) frames.push_back(fn("walk(Node*)"));
    for (const char* name : {"load", "main", "__libc_start_main", "_start"}) frames.push_back(fn(name));
    CHECK_FALSE(frames_recurse(frames));
  }
  SUBCASE("a full window where the recursion covers less than three quarters") {
    for (int i = 0; i < 20; ++i) frames.push_back(fn("f" + std::to_string(i)));
    for (int i = 0; i < 44; ++i) frames.push_back(fn("deep"));
    CHECK_FALSE(frames_recurse(frames));
    frames.erase(frames.begin());  // 19 + 44, one short of the window
    CHECK_FALSE(frames_recurse(frames));
  }
  SUBCASE("recursion only beyond the first 64 frames is ignored") {
    for (int i = 0; i < 62; ++i) frames.push_back(fn("f" + std::to_string(i)));
    for (int i = 0; i < 20; ++i) frames.push_back(fn("deep"));
    CHECK_FALSE(frames_recurse(frames));
  }
  SUBCASE("an ordinary stack") {
    for (const char* name : {"strlen", "parse", "load", "run", "main", "__libc_start_main", "_start"}) {
      frames.push_back(fn(name));
    }
    CHECK_FALSE(frames_recurse(frames));
    CHECK_FALSE(frames_recurse({}));
  }
}

TEST_CASE("normalize_message") {
  CHECK(normalize_message("bad byte at offset 1234") == normalize_message("bad byte at offset 99"));
  CHECK(normalize_message("bad byte at offset 1234") == "bad byte at offset N");
  CHECK(normalize_message("null deref at 0x7ffd1234abcd, size 16") == "null deref at 0xN, size N");
  CHECK(normalize_message("  first line  \nsecond line 42") == "first line");
  CHECK(normalize_message("windows line\r\nrest") == "windows line");
  CHECK(normalize_message("   ") == "");
  CHECK(normalize_message("0x") == "Nx");
  CHECK(normalize_message(std::string(500, 'z')).size() == 200);
  CHECK(normalize_message("invalid literal 'x'") != normalize_message("invalid literal 'y'"));
}

TEST_CASE("make_fingerprint") {
  const std::vector<std::string> state = {"Decoder::read_chunk", "inflate", "main"};
  const std::string fp = make_fingerprint(Kind::kCrash, "SIGSEGV", state, "inflate@sha256:ab12");
  CHECK(fp.size() == 4 + 16);
  CHECK(fp.starts_with("pb1-"));
  CHECK(fp.find_first_not_of("0123456789abcdef", 4) == std::string::npos);
  CHECK(fp == make_fingerprint(Kind::kCrash, "SIGSEGV", state, "inflate@sha256:ab12"));

  CHECK(fp != make_fingerprint(Kind::kStackOverflow, "SIGSEGV", state, "inflate@sha256:ab12"));
  CHECK(fp != make_fingerprint(Kind::kCrash, "SIGABRT", state, "inflate@sha256:ab12"));
  CHECK(fp != make_fingerprint(Kind::kCrash, "SIGSEGV", {"Decoder::read_chunk", "inflate"},
                               "inflate@sha256:ab12"));
  CHECK(fp != make_fingerprint(Kind::kCrash, "SIGSEGV", state, "regex@sha256:ab12"));
  // Field boundaries matter: moving text between fields changes the id.
  CHECK(make_fingerprint(Kind::kCrash, "", {"a", "b"}, "h") !=
        make_fingerprint(Kind::kCrash, "", {"a\x1f" "b"}, "h"));
  CHECK(make_fingerprint(Kind::kCrash, "x", {}, "h") != make_fingerprint(Kind::kCrash, "", {"x"}, "h"));
}

TEST_CASE("same bug, different payloads: one fingerprint") {
  // Two runs reach the same bug through different addresses and template instances.
  const std::vector<SymbolizedFrame> run1 = {
      fn("raise", "/lib/x86_64-linux-gnu/libc.so.6", 0x3bfa0),
      fn("parse_chunk(unsigned char const*, unsigned long) [clone .cold]", "/bin/app", 0x1100),
      fn("Reader<std::vector<char, std::allocator<char> > >::next()", "/bin/app", 0x2200),
      fn("main", "/bin/app", 0x3300),
  };
  const std::vector<SymbolizedFrame> run2 = {
      fn("parse_chunk(unsigned char const*, unsigned long)", "/bin/app", 0x1180),
      fn("Reader<std::string>::next()", "/bin/app", 0x2280),
      fn("main", "/bin/app", 0x3340),
  };
  CHECK(make_fingerprint(Kind::kCrash, "SIGSEGV", crash_state(run1), "h") ==
        make_fingerprint(Kind::kCrash, "SIGSEGV", crash_state(run2), "h"));
}

TEST_CASE("recursion_state does not depend on where in the cycle the stack ran out") {
  auto frame = [](const char* fn) { return SymbolizedFrame{"/usr/bin/prog", 0x1000, fn}; };
  const char* cycle[] = {"Executor::_M_dfs", "Executor::_M_dfs", "Executor::_M_rep_once_more",
                         "Executor::_M_dfs", "Executor::_M_handle_match", "Executor::_M_dfs"};
  std::vector<std::string> first;
  for (std::size_t phase = 0; phase < 6; ++phase) {
    std::vector<SymbolizedFrame> frames;
    frames.push_back(frame("malloc"));  // an ignored frame on top does not matter
    for (std::size_t i = 0; i < 60; ++i) frames.push_back(frame(cycle[(phase + i) % 6]));
    const auto state = recursion_state(frames);
    if (phase == 0) first = state;
    CHECK(state == first);
  }
  CHECK(first == std::vector<std::string>{"Executor::_M_dfs", "Executor::_M_handle_match", "Executor::_M_rep_once_more"});
}

TEST_CASE("recursion_state keeps only repeating functions and falls back without repeats") {
  auto frame = [](const char* fn) { return SymbolizedFrame{"/usr/bin/prog", 0x1000, fn}; };
  // A one-off function on top of the recursion (where the overflow struck) is not part of it.
  std::vector<SymbolizedFrame> frames = {frame("helper_called_once"), frame("walk"), frame("walk"), frame("walk")};
  CHECK(recursion_state(frames) == std::vector<std::string>{"walk"});
  // Helpers above the recursion may repeat too (two inlined accessors with one
  // name); they are not part of the cycle and must not enter the state.
  std::vector<SymbolizedFrame> deep = {frame("access"), frame("access"), frame("invoke")};
  for (int i = 0; i < 5; ++i) {
    for (const char* name : {"dfs", "alt", "dfs", "sub_begin", "dfs", "rep", "repeat", "dfs", "sub_end", "dfs",
                             "match"}) {
      deep.push_back(frame(name));
    }
  }
  const std::vector<std::string> expected = {"alt", "dfs", "match"};
  CHECK(recursion_state(deep) == expected);
  deep.erase(deep.begin(), deep.begin() + 7);  // ran out elsewhere in the cycle, no helpers on top
  CHECK(recursion_state(deep) == expected);
  // No repetition at all: one huge frame; the usual crash state.
  std::vector<SymbolizedFrame> flat = {frame("big_alloca_user"), frame("main")};
  CHECK(recursion_state(flat) == crash_state(flat));
}

}  // namespace
}  // namespace pillbox

TEST_CASE("raise_site: a traceback's exception and innermost frame, a crash's innermost frame, else none") {
  using pillbox::raise_site;
  CHECK(raise_site("handler-error", std::vector<std::string>{"ValueError", "parse_date (p.py)", "born (p.py)"}) ==
        "ValueError at parse_date (p.py)");
  CHECK(raise_site("handler-error", R"j(["ValueError","parse_date (p.py)","joined (p.py)"])j") ==
        "ValueError at parse_date (p.py)");
  CHECK(raise_site("crash", R"j(["parse_header","read_all","main"])j") == "crash at parse_header");
  CHECK(raise_site("handler-error", R"j(["ValueError"])j").empty());  // no frame
  CHECK(raise_site("handler-error", "[]").empty());                    // an in-process handler's error
  CHECK(raise_site("stack-overflow", R"j(["a","b"])j").empty());       // a recursion, sorted: no innermost frame
  CHECK(raise_site("oom", R"j(["f"])j").empty());
  // A record's text is a claim: anything but an array of strings has none.
  CHECK(raise_site("crash", "not json").empty());
  CHECK(raise_site("crash", R"j({"a":1})j").empty());
  CHECK(raise_site("crash", R"j([1,2])j").empty());
}

TEST_CASE("raise_site_id: one program's site; another program's same text is another site") {
  using pillbox::raise_site_id;
  const std::string id = raise_site_id("exec python3 billing/main.py {}", "ValueError at main (main.py)");
  CHECK(pillbox::is_raise_site_id(id));
  CHECK(id == raise_site_id("exec python3 billing/main.py {}", "ValueError at main (main.py)"));
  CHECK(id != raise_site_id("exec python3 importer/main.py {}", "ValueError at main (main.py)"));
  CHECK(raise_site_id("a", "bc") != raise_site_id("ab", "c"));  // the fields do not run into each other
  CHECK(raise_site_id("exec x", "").empty());
  for (const char* bad : {"", "rs-", "rs-0123456789abcde", "rs-0123456789ABCDEF", "ValueError at main (main.py)",
                          "rs-0123456789abcdef0", "xs-0123456789abcdef"}) {
    CAPTURE(bad);
    CHECK_FALSE(pillbox::is_raise_site_id(bad));
  }
  CHECK(pillbox::is_raise_site_id("rs-0123456789abcdef"));
}

TEST_CASE("raise_site_rollup: the sites two or more groups share, the most records first") {
  std::vector<pillbox::store::FingerprintStats> groups(5);
  const char* const states[] = {R"j(["ValueError","parse_date (p.py)","born (p.py)"])j",
                                R"j(["ValueError","parse_date (p.py)","joined (p.py)"])j",
                                R"j(["KeyError","main (p.py)"])j", R"j(["f","g"])j", R"j(["f","h"])j"};
  const char* const kinds[] = {"handler-error", "handler-error", "handler-error", "crash", "crash"};
  const std::int64_t records[] = {2, 1, 7, 5, 5};
  for (std::size_t i = 0; i < groups.size(); ++i) {
    groups[i].fingerprint = "pb1-" + std::to_string(i);
    groups[i].handler_identity = "exec prog";
    groups[i].kind = kinds[i];
    groups[i].crash_state = states[i];
    groups[i].records = records[i];
    groups[i].open = 1;
  }
  const auto rollup = pillbox::raise_site_rollup(groups);
  REQUIRE(rollup.size() == 2);
  CHECK(rollup[0].site.text == "crash at f");
  CHECK(rollup[0].site.id == pillbox::raise_site_id("exec prog", "crash at f"));
  CHECK(rollup[0].groups == std::vector<std::size_t>{3, 4});
  CHECK(rollup[0].records == 10);
  CHECK(rollup[1].site.text == "ValueError at parse_date (p.py)");
  CHECK(rollup[1].groups == std::vector<std::size_t>{0, 1});
  CHECK(rollup[1].records == 3);
  CHECK(rollup[1].open == 2);
  const auto json = pillbox::fingerprint_stats_json(groups, std::vector<nlohmann::json>(5, 1));
  CHECK(json[0]["raise_site"] == "ValueError at parse_date (p.py)");
  CHECK(json[0]["raise_site_groups"] == 2);
  CHECK(json[2]["raise_site"] == "KeyError at main (p.py)");
  CHECK(json[2]["raise_site_groups"] == 1);
  CHECK(json[0]["raise_site_id"] == pillbox::raise_site_id("exec prog", "ValueError at parse_date (p.py)"));
  // Another program's `crash at f` is another site: no rollup of the two.
  groups[4].handler_identity = "exec other";
  CHECK(pillbox::raise_site_rollup(groups).size() == 1);
}
