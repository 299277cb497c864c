#pragma once
// A fresh directory under /tmp for one test, removed with its contents at the
// end of the scope. Every unit test that needs files of its own makes them
// here.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

namespace pillbox::test {

struct ScratchDir {
  std::string path;
  // `name` tells whose directory it is: /tmp/pillbox-NAME-XXXXXX.
  explicit ScratchDir(const std::string& name) {
    std::string tmpl = "/tmp/pillbox-" + name + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // Writes `bytes` to `relative` inside (its folders created) and returns
  // the file's path. A file already there is replaced, not truncated:
  // truncating a file that was just written makes ext4 flush it, which turns
  // a loop of rewrites from milliseconds into seconds.
  std::string write(const std::string& relative, std::string_view bytes) const {
    const std::filesystem::path file = std::filesystem::path(path) / relative;
    std::filesystem::create_directories(file.parent_path());
    std::error_code ignored;
    std::filesystem::remove(file, ignored);
    std::ofstream out(file, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    REQUIRE_MESSAGE(out.good(), "cannot write " << file.string());
    return file.string();
  }
};

}  // namespace pillbox::test
