#include "supervisor/serve/day_chart.h"

#include <algorithm>
#include <cstdint>

#include "supervisor/serve/html_text.h"

namespace pillbox::serve {
namespace {

constexpr int kBarWidth = 6;
constexpr int kStep = 8;  // a bar and the gap after it
constexpr int kHeight = 24;

}  // namespace

std::string day_bars_svg(const nlohmann::json& by_day) {
  if (!by_day.is_array() || by_day.empty()) return "";
  std::int64_t most = 0;
  for (const auto& d : by_day) {
    if (!d.is_object() || !d.contains("day") || !d["day"].is_string() || !d.contains("records") ||
        !d["records"].is_number_integer()) {
      return "";
    }
    most = std::max(most, d["records"].get<std::int64_t>());
  }
  const int width = static_cast<int>(by_day.size()) * kStep;
  std::string svg = "<svg class=\"days\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + std::to_string(width) +
                    "\" height=\"" + std::to_string(kHeight) + "\" viewBox=\"0 0 " + std::to_string(width) + " " +
                    std::to_string(kHeight) + "\" role=\"img\" aria-label=\"records by day, the last " +
                    std::to_string(by_day.size()) + " days (UTC)\">";
  int x = 0;
  for (const auto& d : by_day) {
    const std::int64_t n = d["records"].get<std::int64_t>();
    // A day without records keeps a faint 1-pixel bar, so every day has a
    // place to point at; the tallest bar fills the height.
    const int h = n == 0 ? 1 : std::max<int>(2, static_cast<int>(n * kHeight / std::max<std::int64_t>(most, 1)));
    svg += "<rect x=\"" + std::to_string(x) + "\" y=\"" + std::to_string(kHeight - h) + "\" width=\"" +
           std::to_string(kBarWidth) + "\" height=\"" + std::to_string(h) + "\" fill=\"currentColor\"" +
           (n == 0 ? " fill-opacity=\"0.3\"" : "") + "><title>" + html_escape(d["day"].get<std::string>()) + ": " +
           std::to_string(n) + (n == 1 ? " record" : " records") + "</title></rect>";
    x += kStep;
  }
  return svg + "</svg>";
}

}  // namespace pillbox::serve
