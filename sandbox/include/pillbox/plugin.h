/* pillbox plugin ABI, version 1.
 *
 * A plugin is a shared object exporting one function:
 *
 *     const struct pillbox_plugin *pillbox_plugin_v1(void);
 *
 * pillbox loads it once in the zygote (dlopen), calls `init` there with the
 * `--arg K=V` pairs, then forks one confined child per task and calls `run`
 * in that child. Anything `run` does happens under the policy's rlimits and
 * seccomp allowlist; a crash, hang or blow-up in `run` becomes a classified,
 * fingerprinted failure and never reaches the supervisor.
 *
 * Rules:
 *  - `init` runs before any fork and must not start threads (the zygote is
 *    single-threaded so that fork is safe). Return 0 on success; on failure
 *    write a message into `error` (NUL-terminated, at most `error_len` bytes)
 *    and return non-zero: the run stops with a setup error.
 *  - `run` is called once per process; it may leak, it need not clean up.
 *    Append the result with `io->write` (any bytes; returns -1 once the total
 *    exceeds the output cap, after which the task is reported `output-limit`).
 *    Return 0 for success; to reject the input cleanly call `io->fail` with a
 *    message and return non-zero (reported as `handler-error`).
 *  - Payload bytes are NOT NUL-terminated.
 */
#ifndef PILLBOX_PLUGIN_H
#define PILLBOX_PLUGIN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PILLBOX_PLUGIN_ABI_VERSION 1u

struct pillbox_io {
  const uint8_t *payload;
  size_t payload_len;
  void *opaque; /* owned by pillbox */
  int (*write)(struct pillbox_io *io, const void *data, size_t len);
  void (*fail)(struct pillbox_io *io, const char *message);
};

struct pillbox_plugin {
  uint32_t abi_version; /* PILLBOX_PLUGIN_ABI_VERSION */
  const char *name;     /* short name, used in fingerprints and messages */
  int (*init)(void **state, const char *const *keys, const char *const *values, size_t count,
              char *error, size_t error_len);
  int (*run)(void *state, struct pillbox_io *io);
};

typedef const struct pillbox_plugin *(*pillbox_plugin_entry)(void);
#define PILLBOX_PLUGIN_ENTRY "pillbox_plugin_v1"

#ifdef __cplusplus
}
#endif

#endif /* PILLBOX_PLUGIN_H */
