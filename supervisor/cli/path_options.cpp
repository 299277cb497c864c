#include "supervisor/cli/path_options.h"

#include <cstdio>

#include "supervisor/io/terminal_text.h"

namespace pillbox::cli {

const std::vector<OptionSpec> kOutOptions = {{"out"}, {"out-mode"}};

Expected<std::optional<ResultFiles>> read_result_files(const Args& args) {
  const auto dir = args.value("out");
  const auto mode_text = args.value("out-mode");
  if (!dir) {
    if (mode_text) return Error{"--out-mode is the mode of the files --out DIR writes: give --out too"};
    return std::optional<ResultFiles>();
  }
  mode_t mode = kDefaultResultMode;
  if (mode_text) {
    auto m = parse_file_mode("out-mode", *mode_text);
    if (!m) return Error{m.error()};
    mode = *m;
  }
  auto opened = ResultFiles::open(*dir, mode);
  if (!opened) return Error{opened.error()};
  return std::optional<ResultFiles>(std::move(*opened));
}

std::string write_result_file(ResultFiles& results, std::string_view key, std::string_view output,
                              const std::string& command, bool& failed, std::string_view variant) {
  auto written = results.write(key, output, variant);
  if (written) return std::move(*written);
  // The reason names the result's file, made from a key someone else chose.
  std::fprintf(stderr, "pillbox %s: %s\n", command.c_str(), table_cell(written.error(), 2000).c_str());
  failed = true;
  return {};
}

SymlinksInTree read_symlinks_in_tree(const Args& args) {
  return args.flag("follow-symlinks") ? SymlinksInTree::kFollow : SymlinksInTree::kRefuse;
}

}  // namespace pillbox::cli
