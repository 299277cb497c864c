#pragma once
// Where a failure was raised, without the way it got there: one bug met
// through three callers is three fingerprints (the frames-based rule, which
// stays: docs/architecture.md, 'Fingerprints'), but one raise site of that
// program. Stats, the console and --json show the groups of one site
// together, and list, stats, replay and discard select them as one
// (--raise-site ID), the way ClusterFuzz users see one crash state's top
// frame.
#include <string>
#include <string_view>
#include <vector>

namespace pillbox {

// A traceback's (kind handler-error, crash state: the exception type, then
// frames innermost first): "ValueError at parse_date (parse.py)". A native
// crash's (kind crash, crash state: frames innermost first): "crash at
// parse_header". "" for any other kind, or a crash state without a frame
// (a stack overflow's state is its recursion, sorted: no innermost frame).
std::string raise_site(std::string_view kind, const std::vector<std::string>& crash_state);
// The same from a crash state as records keep it (a JSON array of strings);
// "" when it is not one.
std::string raise_site(std::string_view kind, std::string_view crash_state_json);

// What selects a raise site (--raise-site): "rs-" and 16 hex digits of
// SHA-256 over the handler's identity and the site's text, so that two
// programs' `main` are two sites, and the id survives any text a terminal
// or a form would mangle. "" when `site` is.
std::string raise_site_id(std::string_view handler_identity, std::string_view site);
// Whether `text` has the shape of one ("rs-" and 16 lowercase hex digits).
bool is_raise_site_id(std::string_view text);

}  // namespace pillbox
