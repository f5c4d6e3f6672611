/*
 * dirtier: the lab guest's workload. Allocates a working set of M MiB and dirties P pages per second,
 * so that live migration has a known dirty rate to chase.
 *
 *   kernel command line:  dirtier.mib=64 dirtier.pps=5000     (pps=0: allocate, then stay idle)
 *   or arguments:         dirtier [MIB [PPS]]                 (arguments win over the command line)
 *
 * Prints "dirtier: ready ..." once the working set is touched, then a status line every
 * dirtier.report seconds (default 5). Built with `gcc -static` by deploy/guest/build.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define TICK_NS 10000000L /* 10 ms */

static long cmdline_long(const char *cmdline, const char *key, long dflt)
{
    size_t klen = strlen(key);
    const char *p = cmdline;
    while ((p = strstr(p, key)) != NULL) {
        int at_word_start = (p == cmdline) || p[-1] == ' ' || p[-1] == '\t';
        if (at_word_start && p[klen] == '=') {
            char *end;
            long v = strtol(p + klen + 1, &end, 10);
            if (end != p + klen + 1)
                return v;
        }
        p += klen;
    }
    return dflt;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    char cmdline[4096] = "";
    int fd = open("/proc/cmdline", O_RDONLY);
    if (fd >= 0) {
        ssize_t n = read(fd, cmdline, sizeof cmdline - 1);
        if (n > 0)
            cmdline[n] = '\0';
        close(fd);
    }
    long mib = cmdline_long(cmdline, "dirtier.mib", 64);
    long pps = cmdline_long(cmdline, "dirtier.pps", 0);
    long report = cmdline_long(cmdline, "dirtier.report", 5);
    if (argc > 1)
        mib = strtol(argv[1], NULL, 10);
    if (argc > 2)
        pps = strtol(argv[2], NULL, 10);
    if (mib < 1)
        mib = 1;
    if (pps < 0)
        pps = 0;
    if (report < 1)
        report = 1;

    setvbuf(stdout, NULL, _IOLBF, 0);
    long page = sysconf(_SC_PAGESIZE);
    size_t bytes = (size_t)mib << 20;
    size_t pages = bytes / (size_t)page;
    unsigned char *mem = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        printf("dirtier: cannot allocate %ld MiB: %s\n", mib, strerror(errno));
        return 1;
    }
    mlock(mem, bytes); /* best effort: keep the working set resident */
    for (size_t i = 0; i < pages; i++)
        mem[i * (size_t)page] = (unsigned char)i;
    printf("dirtier: ready mib=%ld pps=%ld pages=%zu\n", mib, pps, pages);

    double start = now_s(), last_report = start;
    uint64_t scheduled = 0, dirtied = 0, last_dirtied = 0, counter = 0;
    size_t next_page = 0;
    struct timespec tick;
    clock_gettime(CLOCK_MONOTONIC, &tick);
    for (;;) {
        if (pps == 0) {
            sleep((unsigned)report);
        } else {
            tick.tv_nsec += TICK_NS;
            if (tick.tv_nsec >= 1000000000L) {
                tick.tv_nsec -= 1000000000L;
                tick.tv_sec += 1;
            }
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &tick, NULL);
            /* pages owed since start; when the (emulated) CPU falls behind, catch up at most one second */
            uint64_t owed = (uint64_t)((now_s() - start) * (double)pps);
            if (owed > scheduled + (uint64_t)pps)
                scheduled = owed - (uint64_t)pps;
            while (scheduled < owed) {
                uint64_t *w = (uint64_t *)(mem + next_page * (size_t)page);
                *w = ++counter;
                if (++next_page == pages)
                    next_page = 0;
                scheduled++;
                dirtied++;
            }
        }
        double t = now_s();
        if (t - last_report >= (double)report) {
            printf("dirtier: t=%.0fs mib=%ld pps=%ld dirtied=%llu rate=%.0f pages/s\n", t - start, mib, pps,
                   (unsigned long long)dirtied, (double)(dirtied - last_dirtied) / (t - last_report));
            last_report = t;
            last_dirtied = dirtied;
        }
    }
}
