/* scripts/bench-files.sh's helper, compiled by it at run time with cc.
 *
 *   est N SEED SIGMA META    prints: files bytes alloc_bytes dirs (what gen makes;
 *                            alloc_bytes counts each file rounded up to 4 KiB)
 *   gen DIR N SEED SIGMA META
 *                            makes DIR (absent) with N files under DIR/AAA/BB/
 *                            (1,000 files a directory): 2% empty, the others
 *                            log-normal with median 4 KiB and sigma SIGMA,
 *                            clipped to 1 B..64 KiB, pseudo-random bytes;
 *                            META=1: every file empty
 *   sum DIR                  prints: entries files dirs bytes digest, where
 *                            digest covers each entry's path, type, permission
 *                            bits and, for files, size, mtime (whole seconds)
 *                            and every byte; order-independent
 *   first DIR data|any       polls DIR every 5 ms (a whole walk a pass, stopping
 *                            at the first hit) until a regular file with at
 *                            least one byte (data) or any regular file (any)
 *                            is there; prints the wall clock then (s.ns) and
 *                            the passes made
 *   run OUT CMD ARGS...      runs CMD, passing on SIGTERM/SIGINT/SIGHUP; when it
 *                            ends writes to OUT: peak RSS KiB (the largest of
 *                            CMD and every descendant it reaped: getrusage's
 *                            ru_maxrss), user s, system s (all of them); exits
 *                            as CMD did
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PER_DIR 1000
#define SUBS 100
#define MAXSIZE 65536

static void die(const char *what, const char *name) {
    fprintf(stderr, "bench-files-helper: %s %s: %s\n", what, name ? name : "", strerror(errno));
    exit(2);
}

static uint64_t splitmix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double unit(uint64_t *s) { return ((splitmix(s) >> 11) + 0.5) / 9007199254740992.0; }

/* The size of file i: the same for est and gen. */
static size_t size_of(uint64_t seed, uint64_t i, double sigma, int meta) {
    if (meta) return 0;
    uint64_t s = seed * 0x100000001B3ull ^ (i * 0x9E3779B97F4A7C15ull);
    if (splitmix(&s) % 1000 < 20) return 0;
    double z = sqrt(-2.0 * log(unit(&s))) * cos(2 * M_PI * unit(&s));
    double v = exp(log(4096.0) + sigma * z);
    if (v < 1) v = 1;
    if (v > MAXSIZE) v = MAXSIZE;
    return (size_t)v;
}

static uint64_t dirs_for(uint64_t n) {
    uint64_t leaves = (n + PER_DIR - 1) / PER_DIR;
    return leaves + (leaves + SUBS - 1) / SUBS;
}

static int cmd_est(uint64_t n, uint64_t seed, double sigma, int meta) {
    uint64_t bytes = 0, alloc = 0;
    for (uint64_t i = 0; i < n; i++) {
        size_t sz = size_of(seed, i, sigma, meta);
        bytes += sz;
        alloc += (sz + 4095) / 4096 * 4096;
    }
    printf("%llu %llu %llu %llu\n", (unsigned long long)n, (unsigned long long)bytes,
           (unsigned long long)alloc, (unsigned long long)dirs_for(n));
    return 0;
}

static int cmd_gen(const char *dir, uint64_t n, uint64_t seed, double sigma, int meta) {
    static unsigned char buf[MAXSIZE + 8];
    char path[4096];
    if (mkdir(dir, 0755) != 0) die("mkdir", dir);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t leaf = i / PER_DIR;
        if (i % PER_DIR == 0) {
            if (leaf % SUBS == 0) {
                snprintf(path, sizeof path, "%s/%03llu", dir, (unsigned long long)(leaf / SUBS));
                if (mkdir(path, 0755) != 0) die("mkdir", path);
            }
            snprintf(path, sizeof path, "%s/%03llu/%02llu", dir, (unsigned long long)(leaf / SUBS),
                     (unsigned long long)(leaf % SUBS));
            if (mkdir(path, 0755) != 0) die("mkdir", path);
        }
        size_t sz = size_of(seed, i, sigma, meta);
        uint64_t s = seed ^ (i << 20) ^ 0x5DEECE66Dull;
        for (size_t k = 0; k < sz; k += 8) {
            uint64_t w = splitmix(&s);
            memcpy(buf + k, &w, 8);
        }
        snprintf(path, sizeof path, "%s/%03llu/%02llu/f%07llu", dir, (unsigned long long)(leaf / SUBS),
                 (unsigned long long)(leaf % SUBS), (unsigned long long)i);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) die("creating", path);
        if (sz && write(fd, buf, sz) != (ssize_t)sz) die("writing", path);
        if (close(fd) != 0) die("closing", path);
        if (i && i % 1000000 == 0) fprintf(stderr, "bench-files-helper: %llu files\n", (unsigned long long)i);
    }
    return 0;
}

/* --- sum ---------------------------------------------------------------- */
#define P1 0x9E3779B185EBCA87ull
#define P2 0xC2B2AE3D27D4EB4Full
static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
static uint64_t mix(uint64_t h, uint64_t w) { return rotl(h ^ (w * P2), 31) * P1; }
static uint64_t fin(uint64_t h) {
    h ^= h >> 33; h *= 0xFF51AFD7ED558CCDull; h ^= h >> 33; h *= 0xC4CEB9FE1A85EC53ull;
    return h ^ (h >> 33);
}
static uint64_t hash_bytes(uint64_t h, const unsigned char *p, size_t n) {
    size_t k = 0;
    for (; k + 8 <= n; k += 8) { uint64_t w; memcpy(&w, p + k, 8); h = mix(h, w); }
    uint64_t t = 0;
    for (size_t j = 0; k < n; k++, j++) t |= (uint64_t)p[k] << (8 * j);
    return mix(h, t ^ n);
}

static struct { uint64_t entries, files, dirs, bytes, sum, xor; } acc;
static unsigned char rbuf[1 << 20];

static void add(uint64_t h) { acc.entries++; h = fin(h); acc.sum += h; acc.xor ^= rotl(h, 17) * P1; }

static void walk_sum(int dfd, char *rel, size_t rlen) {
    DIR *d = fdopendir(dfd);
    if (!d) die("opendir", rel);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        size_t nl = strlen(e->d_name);
        if (rlen + nl + 2 > 4096) { errno = ENAMETOOLONG; die("path", rel); }
        rel[rlen] = '/';
        memcpy(rel + rlen + 1, e->d_name, nl + 1);
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) die("stat", rel);
        uint64_t h = hash_bytes(0x1234, (const unsigned char *)rel, rlen + 1 + nl);
        h = mix(h, (uint64_t)(st.st_mode & S_IFMT) | ((uint64_t)(st.st_mode & 07777) << 32));
        if (S_ISDIR(st.st_mode)) {
            acc.dirs++;
            add(h);
            int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd < 0) die("open", rel);
            walk_sum(fd, rel, rlen + 1 + nl);
        } else if (S_ISREG(st.st_mode)) {
            acc.files++;
            acc.bytes += st.st_size;
            h = mix(mix(h, st.st_size), st.st_mtim.tv_sec);
            int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC | O_NOATIME);
            if (fd < 0) fd = openat(dirfd(d), e->d_name, O_RDONLY | O_CLOEXEC);
            if (fd < 0) die("open", rel);
            ssize_t r;
            while ((r = read(fd, rbuf, sizeof rbuf)) > 0) h = hash_bytes(h, rbuf, r);
            if (r < 0) die("read", rel);
            close(fd);
            add(h);
        } else {
            add(h); /* symlinks and others: path, type and mode only */
        }
        rel[rlen] = 0;
    }
    closedir(d);
}

static int cmd_sum(const char *dir) {
    char rel[4096] = ".";
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) die("open", dir);
    walk_sum(fd, rel, 1);
    printf("%llu %llu %llu %llu %016llx%016llx\n", (unsigned long long)acc.entries,
           (unsigned long long)acc.files, (unsigned long long)acc.dirs, (unsigned long long)acc.bytes,
           (unsigned long long)acc.sum, (unsigned long long)acc.xor);
    return 0;
}

/* --- first -------------------------------------------------------------- */
static int want_data;
static int walk_first(int dfd) {
    DIR *d = fdopendir(dfd);
    if (!d) { close(dfd); return 0; }
    struct dirent *e;
    int hit = 0;
    while (!hit && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue; /* gone */
        if (S_ISREG(st.st_mode)) {
            hit = !want_data || st.st_size > 0;
        } else if (S_ISDIR(st.st_mode)) {
            int fd = openat(dirfd(d), e->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (fd >= 0) hit = walk_first(fd);
        }
    }
    closedir(d);
    return hit;
}

static int cmd_first(const char *dir, const char *mode) {
    want_data = strcmp(mode, "any") != 0;
    struct timespec nap = {0, 5000000}, now;
    for (unsigned long passes = 1;; passes++) {
        int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd >= 0 && walk_first(fd)) {
            clock_gettime(CLOCK_REALTIME, &now);
            printf("%lld.%09ld %lu\n", (long long)now.tv_sec, now.tv_nsec, passes);
            return 0;
        }
        nanosleep(&nap, NULL);
    }
}

/* --- run ---------------------------------------------------------------- */
static volatile pid_t child;
static void pass_on(int sig) { if (child > 0) kill(child, sig); }

static int cmd_run(const char *out, char **argv) {
    struct sigaction sa = {0};
    sa.sa_handler = pass_on;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    child = fork();
    if (child < 0) die("fork", argv[0]);
    if (child == 0) {
        signal(SIGTERM, SIG_DFL); signal(SIGINT, SIG_DFL); signal(SIGHUP, SIG_DFL);
        execvp(argv[0], argv);
        die("exec", argv[0]);
    }
    int status;
    struct rusage ru;
    while (wait4(child, &status, 0, &ru) < 0)
        if (errno != EINTR) die("wait4", argv[0]);
    FILE *f = fopen(out, "w");
    if (!f) die("writing", out);
    fprintf(f, "%ld %ld.%06ld %ld.%06ld\n", ru.ru_maxrss, (long)ru.ru_utime.tv_sec,
            (long)ru.ru_utime.tv_usec, (long)ru.ru_stime.tv_sec, (long)ru.ru_stime.tv_usec);
    fclose(f);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int main(int argc, char **argv) {
    if (argc >= 6 && !strcmp(argv[1], "est"))
        return cmd_est(strtoull(argv[2], 0, 10), strtoull(argv[3], 0, 10), atof(argv[4]), atoi(argv[5]));
    if (argc >= 7 && !strcmp(argv[1], "gen"))
        return cmd_gen(argv[2], strtoull(argv[3], 0, 10), strtoull(argv[4], 0, 10), atof(argv[5]),
                       atoi(argv[6]));
    if (argc >= 3 && !strcmp(argv[1], "sum")) return cmd_sum(argv[2]);
    if (argc >= 4 && !strcmp(argv[1], "first")) return cmd_first(argv[2], argv[3]);
    if (argc >= 4 && !strcmp(argv[1], "run")) return cmd_run(argv[2], argv + 3);
    fprintf(stderr, "usage: see the comment at the top of scripts/bench-files-helper.c\n");
    return 2;
}
