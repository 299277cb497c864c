#pragma once
// A fingerprint group's records by day (the "by_day" of quarantine stats
// --json, supervisor/ops/quarantine_views_json.h) as a small inline SVG bar
// chart for the /groups page: one bar a day, oldest first, each with a
// <title> ("2026-11-19: 3 records") that the browser shows as a tooltip.
// Attributes only, no style attribute: the console's Content-Security-Policy
// (default-src 'self') refuses inline style.
#include <nlohmann/json.hpp>
#include <string>

namespace pillbox::serve {

// "" when `by_day` is not an array of {"day", "records"} objects.
std::string day_bars_svg(const nlohmann::json& by_day);

}  // namespace pillbox::serve
