#pragma once
// A fresh directory under /tmp for one test, removed with its contents at the
// end of the scope.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace pillbox::test {

struct ScratchDir {
  std::string path;
  explicit ScratchDir(const std::string& name) {
    std::string tmpl = "/tmp/pillbox-" + name + "-XXXXXX";
    REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
};

}  // namespace pillbox::test
