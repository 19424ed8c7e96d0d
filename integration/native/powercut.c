/*
 * powercut.so: an LD_PRELOAD shim that records what a server has made durable, so a test can
 * model a power cut (the OS loses everything written but not yet fsynced) after a SIGKILL.
 *
 * Every successful fsync() or fdatasync() of a file whose path contains ".aof" appends one
 * line "<size> <path>" to the file named by COMPOZY_FSYNC_LOG. The size is read *before* the
 * sync starts, so it never counts bytes that were written while the sync ran: everything up to
 * that size was on disk when the call returned.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int log_fd = -1;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void open_log(void) {
    const char *path = getenv("COMPOZY_FSYNC_LOG");
    if (path != NULL) {
        log_fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    }
}

static void note(int fd, off_t size) {
    char link[64], target[4096], line[4200];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) {
        return;
    }
    target[n] = '\0';
    if (strstr(target, ".aof") == NULL) {
        return;
    }
    int len = snprintf(line, sizeof line, "%lld %s\n", (long long)size, target);
    if (len > 0 && len < (int)sizeof line) {
        ssize_t ignored = write(log_fd, line, (size_t)len); /* O_APPEND: one atomic line */
        (void)ignored;
    }
}

static int synced(int fd, int (*real)(int)) {
    pthread_once(&log_once, open_log);
    struct stat st;
    int known = log_fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    int rc = real(fd);
    if (rc == 0 && known) {
        note(fd, st.st_size);
    }
    return rc;
}

int fsync(int fd) {
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    }
    return synced(fd, real);
}

int fdatasync(int fd) {
    static int (*real)(int);
    if (real == NULL) {
        real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
    }
    return synced(fd, real);
}
