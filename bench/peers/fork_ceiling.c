/* bench/peers/fork_ceiling.c — the floor of one process per task.
 *
 * usage: fork_ceiling PROCS TASKS
 * Starts PROCS loops (one per core in bench/compare.sh); together they run
 * TASKS times fork + _exit(0) + waitpid. Prints the seconds all of it took.
 * No process per task can cost less than this on the same host. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char** argv) {
  if (argc != 3) { fprintf(stderr, "usage: fork_ceiling PROCS TASKS\n"); return 2; }
  int procs = atoi(argv[1]);
  long tasks = atol(argv[2]);
  if (procs < 1 || tasks < procs) { fprintf(stderr, "fork_ceiling: bad PROCS or TASKS\n"); return 2; }
  double t0 = now();
  for (int p = 0; p < procs; ++p) {
    pid_t loop = fork();
    if (loop < 0) { perror("fork"); return 1; }
    if (loop == 0) {
      long mine = tasks / procs + (p < tasks % procs ? 1 : 0);
      for (long i = 0; i < mine; ++i) {
        pid_t child = fork();
        if (child < 0) _exit(1);
        if (child == 0) _exit(0);
        int status;
        if (waitpid(child, &status, 0) != child || status != 0) _exit(1);
      }
      _exit(0);
    }
  }
  int failed = 0, status;
  while (wait(&status) > 0) failed |= status != 0;
  printf("%.6f\n", now() - t0);
  return failed;
}
