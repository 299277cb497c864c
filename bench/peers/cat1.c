/* bench/peers/cat1.c — the tool every exec-mode row of bench/compare.sh runs.
 *
 * usage: cat1 FILE
 * Copies FILE to stdout, like a parser that reads its input and prints a
 * result. A file starting with "CRASH" makes it write through a null pointer
 * (a real SIGSEGV): the poison of the crash-path row. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  int fd = open(argv[1], O_RDONLY);
  if (fd < 0) return 1;
  char buf[65536];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n >= 5 && memcmp(buf, "CRASH", 5) == 0) *(volatile int*)0 = 1;
  while (n > 0) {
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(1, buf + off, (size_t)(n - off));
      if (w < 0) return 1;
      off += w;
    }
    n = read(fd, buf, sizeof buf);
  }
  return n < 0;
}
