/* wordcount: the reference pillbox plugin.
 *
 * Counts the lines, words and bytes of each payload, like `wc`, and writes
 *
 *     LINES WORDS BYTES\n
 *
 * With `--arg unit=lines` (or words, or bytes) it writes only that number.
 *
 * Build (out of tree):
 *     cc -std=c11 -shared -fPIC -I<pillbox>/sandbox/include -o libwordcount.so wordcount.c
 * Run:
 *     pillbox run --handler plugin:./libwordcount.so --arg unit=words INPUT...
 *
 * Read this file top to bottom next to <pillbox/plugin.h>; docs/plugins.md
 * explains the rules in prose. The points every plugin must get right are
 * marked RULE.
 */

/* Out of tree, write `#include <pillbox/plugin.h>` and pass
 * -I<pillbox>/sandbox/include; this relative form lets the example build
 * inside the pillbox tree with no include flags at all. */
#include "../../sandbox/include/pillbox/plugin.h"

#include <stdio.h>
#include <string.h>

/* What `init` decides once, in the zygote, and `run` reads in every child. */
enum unit { UNIT_ALL, UNIT_LINES, UNIT_WORDS, UNIT_BYTES };

struct wordcount_state {
  enum unit unit;
};

/* The ABI has no hook to free the state, and init may run more than once in
 * a process (one handler per configuration). wordcount has only four
 * possible states, so it hands out a pointer to one of these instead of
 * allocating. A plugin with real state would malloc it in init and let it
 * live as long as the process. */
static struct wordcount_state wordcount_states[] = {
    {UNIT_ALL}, {UNIT_LINES}, {UNIT_WORDS}, {UNIT_BYTES}};

/* Called once, in the zygote, before any fork, with the --arg pairs.
 *
 * RULE: no threads here (the zygote must stay single-threaded so fork is
 * safe). This is the place for one-time work, done before confinement:
 * parse arguments, build tables, read data files.
 *
 * RULE: reject what you do not understand, with a message that says what
 * you accept. A typo in an --arg should stop the run before any task starts,
 * not silently change the results. */
static int wordcount_init(void **state, const char *const *keys, const char *const *values,
                          size_t count, char *error, size_t error_len) {
  enum unit unit = UNIT_ALL;
  for (size_t i = 0; i < count; ++i) {
    if (strcmp(keys[i], "unit") != 0) {
      /* snprintf always NUL-terminates within error_len, as pillbox expects. */
      snprintf(error, error_len, "unknown --arg '%s' (wordcount takes: unit=lines|words|bytes)", keys[i]);
      return 1;
    }
    if (strcmp(values[i], "lines") == 0) {
      unit = UNIT_LINES;
    } else if (strcmp(values[i], "words") == 0) {
      unit = UNIT_WORDS;
    } else if (strcmp(values[i], "bytes") == 0) {
      unit = UNIT_BYTES;
    } else {
      snprintf(error, error_len, "--arg unit must be lines, words or bytes, not '%s'", values[i]);
      return 1;
    }
  }

  *state = &wordcount_states[unit]; /* handed back to every call of run */
  return 0;
}

/* Whitespace as `wc` sees it in the C locale. Written out rather than
 * calling isspace() so the result never depends on the process locale. */
static int is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r';
}

/* Called once per task, in a confined child.
 *
 * RULE: the payload is NOT NUL-terminated: use io->payload_len, never strlen.
 *
 * RULE: everything here runs under the policy's rlimits and seccomp
 * allowlist. Compute on memory; do not open sockets, write files, start
 * threads or exec programs: the child would be killed and the task reported
 * as a seccomp violation.
 *
 * RULE: a crash or hang here is not your problem to guard against: pillbox
 * classifies it (crash, stack-overflow, cpu-limit, oom, ...) and quarantines
 * the payload. Only clean rejections need io->fail.
 *
 * The process exits after run, so `run` may leak; it need not free. */
static int wordcount_run(void *state, struct pillbox_io *io) {
  const struct wordcount_state *s = state;

  size_t lines = 0, words = 0;
  int in_word = 0;
  for (size_t i = 0; i < io->payload_len; ++i) {
    const uint8_t c = io->payload[i];
    if (c == '\n') ++lines;
    if (is_space(c)) {
      in_word = 0;
    } else if (!in_word) {
      in_word = 1;
      ++words;
    }
  }

  char line[80];
  int n;
  switch (s->unit) {
    case UNIT_LINES: n = snprintf(line, sizeof line, "%zu\n", lines); break;
    case UNIT_WORDS: n = snprintf(line, sizeof line, "%zu\n", words); break;
    case UNIT_BYTES: n = snprintf(line, sizeof line, "%zu\n", io->payload_len); break;
    default: n = snprintf(line, sizeof line, "%zu %zu %zu\n", lines, words, io->payload_len); break;
  }

  /* RULE: results go through io->write (any bytes, as many calls as you
   * like). It returns -1 once the output cap is exceeded; stop then: pillbox
   * already reports the task as output-limit, whatever run returns.
   *
   * To reject an input cleanly (reported as handler-error, with your
   * message), call io->fail(io, "why") and return non-zero. wordcount
   * accepts every payload, so it never needs to. */
  if (io->write(io, line, (size_t)n) != 0) return 1;
  return 0;
}

/* The one exported symbol. pillbox checks abi_version first, so a plugin
 * built against another version of plugin.h is refused with a clear message
 * instead of being called with the wrong layout. */
const struct pillbox_plugin *pillbox_plugin_v1(void) {
  static const struct pillbox_plugin plugin = {
      .abi_version = PILLBOX_PLUGIN_ABI_VERSION,
      .name = "wordcount", /* appears in fingerprints and messages */
      .init = wordcount_init,
      .run = wordcount_run,
  };
  return &plugin;
}
