#pragma once
// Text that came from a payload or its producer, made safe to print on a
// terminal: a quarantined payload is hostile by definition, and raw control
// bytes (ESC, CSI, OSC) could rewrite the screen or the window title.
#include <cstddef>
#include <string>
#include <string_view>

namespace pillbox {

// The length of the bidirectional control that `text` starts with (U+061C,
// U+200E, U+200F, U+202A..U+202E, U+2066..U+2069, in UTF-8), or 0. Shown as
// they are, they reorder what follows them: a key "invoice\u202Efdp.exe"
// reads "invoiceexe.pdf", and a value can seem to sit in another column.
std::size_t bidi_control_at(std::string_view text);

// One table cell: control bytes (C0, DEL and UTF-8-encoded C1) and
// bidirectional controls become '?', cut to `width` with a trailing '~'.
std::string table_cell(std::string_view text, std::size_t width);

// `text` at most `max_bytes` long: cut after the last whole word that fits
// (or, in a word longer than half of that, at a UTF-8 boundary) and marked
// "...".
std::string cut_at_word(std::string_view text, std::size_t max_bytes);

// A preview of the first `max_bytes` of a payload, as lines that start with
// `indent`: printable ASCII text (tabs and newlines kept) as it is, anything
// else as a hex dump with offsets. Says how much was left out.
std::string payload_preview(std::string_view bytes, std::size_t max_bytes, const std::string& indent);

// Lines a program printed (its stderr), each on a line of its own that
// starts with `indent` and "| ": tabs become spaces, other control bytes '?'
// (table_cell), lines longer than `width` are cut. A last line without its
// newline is shown all the same.
std::string text_lines(std::string_view text, const std::string& indent, std::size_t width);

}  // namespace pillbox
