#pragma once
// Where a failure was raised, without the way it got there: one bug met
// through three callers is three fingerprints (the frames-based rule, which
// stays: docs/architecture.md, 'Fingerprints'), but one raise site. Stats,
// the console and --json show the groups of one site together, and list,
// stats and replay select them as one (--raise-site), the way ClusterFuzz
// users see one crash state's top frame.
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

}  // namespace pillbox
