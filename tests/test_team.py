"""rstf's own OpenMP team (rstf/runtime/rstf_team.c): the libgomp entry points gcc's -fopenmp
code calls, as the op libraries of `poly` and `none` carry them. A C program compiled with
-fopenmp and linked with the team instead of libgomp checks what the generated C relies on:
every iteration of a (collapsed) static loop run exactly once by a thread of the requested
team, the same for the dynamic loops the generated C marks (`schedule(nonmonotonic: dynamic,
K)`: static ranges that the threads steal from each other, a thread held up losing its
iterations to the others, a region closed without the workers that come too late), the
barrier that ends `omp for`, a nested region (rstf's batch loop around parallel sample code)
running on its caller alone, team sizes changing from region to region, the workers' sleep
and wake-up (within a call and between calls), and a child of fork() starting its own
workers. Two more programs check the workers' placement: a worker held on the CPU of the
thread that starts the regions is moved off it, and a sleeping worker is woken off it."""
from __future__ import annotations

import os
import subprocess

import pytest

from rstf.build.compiler import CUSTOM_OPS_DIR, TEAM_SOURCE

PROGRAM = r"""
#define _DEFAULT_SOURCE  /* usleep, under -std=c11 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int omp_get_thread_num(void);
int omp_get_num_threads(void);
void omp_set_num_threads(int);
void rstf_team_lock(void);
void rstf_team_unlock(void);

#define FAIL(...) do { printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)
enum { R = 37, C = 29, N = 1000 };
static int count[R][C], seen[64], b[N], c[N];

/* A collapsed static loop: each (i, j) once, by threads 0..threads-1 only. */
static void loop(int threads) {
    omp_set_num_threads(threads);
    memset(count, 0, sizeof count);
    memset(seen, 0, sizeof seen);
    #pragma omp parallel for collapse(2)
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            count[i][j] += 1;
            seen[omp_get_thread_num()] = omp_get_num_threads();
        }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j)
            if (count[i][j] != 1) FAIL("threads %d: (%d, %d) ran %d times", threads, i, j, count[i][j]);
    for (int t = 0; t < 64; ++t)
        if (seen[t] != (t < threads && t < R * C ? threads : 0))
            FAIL("threads %d: thread %d saw a team of %d", threads, t, seen[t]);
}

/* Two loops in one region: the second reads what other threads wrote in the first. */
static void barrier(int threads, int round) {
    omp_set_num_threads(threads);
    #pragma omp parallel
    {
        #pragma omp for schedule(static)
        for (int i = 0; i < N; ++i) b[i] = i + round;
        #pragma omp for schedule(static)
        for (int i = 0; i < N; ++i) c[i] = b[N - 1 - i];
    }
    for (int i = 0; i < N; ++i)
        if (c[i] != N - 1 - i + round) FAIL("threads %d: barrier broken at %d", threads, i);
}

/* Dynamic loops: each (i, j) once, by the team's threads; with thread 1 held up at its first
 * iteration, thread 0 steals from its range. A negative step; `omp for` in a region between
 * static loops. */
static int dcount[R][C], by[64], d[N];
static void dynamic(int threads, int round) {
    omp_set_num_threads(threads);
    memset(dcount, 0, sizeof dcount);
    memset(seen, 0, sizeof seen);
    memset(by, 0, sizeof by);
    const int hold = round % 50 == 0;
    #pragma omp parallel for collapse(2) schedule(nonmonotonic: dynamic, 3)
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j) {
            const int t = omp_get_thread_num();
            if (hold && t == 1 && by[1] == 0) usleep(20000);
            __atomic_fetch_add(&dcount[i][j], 1, __ATOMIC_RELAXED);
            __atomic_fetch_add(&by[t], 1, __ATOMIC_RELAXED);
            seen[t] = omp_get_num_threads();
        }
    for (int i = 0; i < R; ++i)
        for (int j = 0; j < C; ++j)
            if (dcount[i][j] != 1)
                FAIL("dynamic, threads %d: (%d, %d) ran %d times", threads, i, j, dcount[i][j]);
    for (int t = 0; t < 64; ++t)
        if (seen[t] > 0 && (t >= threads || seen[t] != threads))
            FAIL("dynamic, threads %d: thread %d saw a team of %d", threads, t, seen[t]);
    if (hold && threads == 2 && by[0] < R * C * 3 / 4)
        FAIL("dynamic: thread 0 ran %d of %d iterations while thread 1 was held up", by[0], R * C);
    memset(d, 0, sizeof d);
    #pragma omp parallel for schedule(nonmonotonic: dynamic, 5)
    for (int i = N - 1; i >= 0; i -= 3) d[i] += 1;
    for (int i = 0; i < N; ++i)
        if (d[i] != ((N - 1 - i) % 3 == 0)) FAIL("dynamic, step -3: %d ran %d times", i, d[i]);
    #pragma omp parallel
    {
        #pragma omp for schedule(static) nowait
        for (int i = 0; i < N; ++i) b[i] = i + round;
        #pragma omp for schedule(nonmonotonic: dynamic, 7)
        for (int i = 0; i < N; ++i) c[i] = 2 * i + round;
        #pragma omp for schedule(static)
        for (int i = 0; i < N; ++i) d[i] = c[N - 1 - i] - b[i];
    }
    for (int i = 0; i < N; ++i)
        if (d[i] != 2 * (N - 1 - i) - i) FAIL("dynamic omp for, threads %d: %d", threads, i);
}

/* A dynamic loop over less work than a worker's wake-up: the starting thread takes every
 * chunk and closes the region without the workers that have not joined yet (with
 * RSTF_SPIN_US=0 they sleep between regions); the static loop after it (next round) then
 * needs every worker again. */
static void tiny(int threads) {
    int hits[4] = {0};
    omp_set_num_threads(threads);
    #pragma omp parallel for schedule(nonmonotonic: dynamic, 1)
    for (int i = 0; i < 4; ++i) hits[i] += 1;
    for (int i = 0; i < 4; ++i)
        if (hits[i] != 1) FAIL("tiny dynamic loop, threads %d: %d ran %d times", threads, i, hits[i]);
}

/* The batch loop: an outer num_threads(P) region, an inner region in each iteration. */
static void nested(void) {
    int outer[8] = {0}, inner[8] = {0};
    omp_set_num_threads(3);
    #pragma omp parallel for num_threads(2) schedule(static)
    for (int s = 0; s < 8; ++s) {
        outer[s] = omp_get_thread_num();
        #pragma omp parallel for
        for (int k = 0; k < 4; ++k) inner[s] += omp_get_num_threads();
        #pragma omp parallel for schedule(nonmonotonic: dynamic, 3)
        for (int k = 0; k < 10; ++k) inner[s] += k == 9 ? -9 : 1;  /* all ten, here */
        if (omp_get_thread_num() != outer[s]) FAIL("nested region changed the thread number");
    }
    for (int s = 0; s < 8; ++s) {
        if (inner[s] != 4) FAIL("a nested region ran with more than its caller");
        if (outer[s] != s / 4) FAIL("sample %d on thread %d", s, outer[s]);
    }
}

int main(void) {
    static const int sizes[] = {2, 1, 3, 2, 4, 2, 3, 1, 4, 4, 2};
    rstf_team_lock();
    for (int r = 0; r < 1500; ++r) {
        const int t = sizes[r % 11];
        loop(t);
        barrier(t, r);
        dynamic(t, r);
        tiny(t);
        if (r % 500 == 250) usleep(3000);  /* in a call, past RSTF_SPIN_US 100 and 0 */
        if (r % 500 == 0) {  /* between calls: the workers sleep 100 us after its end */
            rstf_team_unlock();
            usleep(3000);
            rstf_team_lock();
        }
    }
    nested();
    rstf_team_unlock();
    pid_t pid = fork();
    if (pid == 0) {
        rstf_team_lock();
        for (int r = 0; r < 200; ++r) { loop(sizes[r % 11]); barrier(3, r); dynamic(2, r); }
        rstf_team_unlock();
        _exit(0);
    }
    int status = 0;
    if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL("the child of fork() failed");
    loop(2);
    printf("ok\n");
    return 0;
}
"""


def _build(d, text: str) -> str:
    """The C program `text` compiled with -fopenmp and linked with the team, in folder d."""
    src, exe = d / "t.c", d / "t"
    src.write_text(text)
    objs = []
    for c in (str(src), os.path.join(CUSTOM_OPS_DIR, TEAM_SOURCE)):
        obj = str(d / (os.path.basename(c) + ".o"))
        subprocess.run(["gcc", "-O2", "-std=c11", "-fopenmp", "-fvisibility=hidden", "-c", c,
                        "-o", obj], check=True)
        objs.append(obj)
    # Linked without -fopenmp: everything OpenMP must come from the team.
    subprocess.run(["gcc", *objs, "-o", str(exe), "-pthread"], check=True)
    libs = subprocess.run(["ldd", str(exe)], capture_output=True, text=True).stdout
    assert "libgomp" not in libs
    return str(exe)


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return _build(tmp_path_factory.mktemp("team"), PROGRAM)


@pytest.mark.parametrize("spin_us", ["5000", "100", "0"])
def test_team_runs_what_the_generated_c_needs(program, spin_us):
    # 0: a worker sleeps after every region, so each region start is a futex wake-up.
    proc = subprocess.run([program], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "RSTF_SPIN_US": spin_us})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == "ok"


# Where thread 1 runs in dynamic regions of 40 chunks of 20 us each.
PLACEMENT_REGIONS = r"""
#define _GNU_SOURCE
#include <dirent.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

void omp_set_num_threads(int);
int omp_get_thread_num(void);
void rstf_team_lock(void);
void rstf_team_unlock(void);

#define FAIL(...) do { printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)
enum { REGIONS = 400 };
static volatile int worker_cpu[REGIONS]; /* where thread 1 ran in region r; -1: it did not */

static void busy_us(long us) {
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void region(int r) {
    worker_cpu[r] = -1;
    #pragma omp parallel for schedule(nonmonotonic: dynamic, 1)
    for (int i = 0; i < 40; ++i) {
        busy_us(20);
        if (omp_get_thread_num() == 1) worker_cpu[r] = sched_getcpu();
    }
}
"""

PLACEMENT = PLACEMENT_REGIONS + r"""
int main(void) {
    omp_set_num_threads(2);
    rstf_team_lock();
    region(0); /* the worker starts, with every CPU of the process */
    /* This thread and every other thread of the process (the worker) on one CPU: as Linux
     * sometimes leaves a woken worker beside the thread that woke it. */
    const int cpu = sched_getcpu();
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    if (sched_setaffinity(0, sizeof one, &one) != 0) FAIL("sched_setaffinity");
    const long self = syscall(SYS_gettid);
    DIR *d = opendir("/proc/self/task");
    for (struct dirent *e; d && (e = readdir(d));) {
        const long tid = atol(e->d_name);
        if (tid > 0 && tid != self && sched_setaffinity(tid, sizeof one, &one) != 0)
            FAIL("sched_setaffinity %ld", tid);
    }
    if (d) closedir(d);
    for (int r = 1; r < REGIONS; ++r) region(r);
    rstf_team_unlock();
    int away = 0, beside = 0;
    for (int r = REGIONS / 2; r < REGIONS; ++r) {
        away += worker_cpu[r] >= 0 && worker_cpu[r] != cpu;
        beside += worker_cpu[r] == cpu;
    }
    if (away < REGIONS / 8)
        FAIL("the worker ran on another CPU in %d of the last %d regions, on this one in %d",
             away, REGIONS / 2, beside);
    printf("ok %d %d\n", away, beside);
    return 0;
}
"""


def test_team_moves_a_worker_off_the_starting_threads_cpu(tmp_path):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")  # (one CPU: nowhere to move a worker to)
    proc = subprocess.run([_build(tmp_path, PLACEMENT)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")


WAKE_PLACEMENT = PLACEMENT_REGIONS + r"""
int main(void) {
    omp_set_num_threads(2);
    static int starter_cpu[REGIONS];
    enum { CALLS = 60 };
    for (int r = 0; r < CALLS; ++r) {
        /* Longer than a worker waits after a call: it is asleep when the call starts. */
        usleep(3000);
        rstf_team_lock();
        starter_cpu[r] = sched_getcpu();
        region(r);
        rstf_team_unlock();
    }
    int away = 0, beside = 0, missed = 0;
    for (int r = 1; r < CALLS; ++r) {
        away += worker_cpu[r] >= 0 && worker_cpu[r] != starter_cpu[r];
        beside += worker_cpu[r] == starter_cpu[r];
        missed += worker_cpu[r] < 0;
    }
    if (away < (CALLS - 1) / 2)
        FAIL("a woken worker ran on another CPU in %d of %d calls, on the waker's in %d, "
             "in none in %d", away, CALLS - 1, beside, missed);
    printf("ok %d %d %d\n", away, beside, missed);
    return 0;
}
"""


def test_team_wakes_a_sleeping_worker_off_the_starting_threads_cpu(tmp_path):
    """Calls far enough apart that the worker sleeps between them: thread 0 wakes it at the
    call's region, and Linux may queue a woken thread beside its (busy) waker, where it would
    miss the region. The team moves it off first, so it works on another CPU alongside."""
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    proc = subprocess.run([_build(tmp_path, WAKE_PLACEMENT)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("ok")


FPMODE = r"""
#include <stdio.h>
#include <immintrin.h>

void omp_set_num_threads(int);
int omp_get_thread_num(void);

static volatile float tiny = 1e-39f, one = 1.0f;  /* a denormal; volatile: not folded */
static float got[4][2];

static void region(int r) {
    #pragma omp parallel for schedule(static, 1)
    for (int t = 0; t < 2; ++t) got[r][omp_get_thread_num()] = tiny * one;
}

int main(void) {
    omp_set_num_threads(2);
    region(0);                                /* the worker starts, denormals kept */
    _mm_setcsr(_mm_getcsr() | 0x8040);        /* FTZ | DAZ, as TensorFlow's threads run */
    region(1);
    _mm_setcsr(_mm_getcsr() & ~0x8040u);
    region(2);
    for (int r = 0; r < 3; ++r) printf("%g %g\n", got[r][0], got[r][1]);
    return 0;
}
"""


def test_workers_run_under_the_callers_floating_point_mode(tmp_path):
    """A worker started before the caller flushed denormals flushes them in the caller's
    regions from then on, and stops when the caller does."""
    proc = subprocess.run([_build(tmp_path, FPMODE)], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [[float(v) for v in line.split()] for line in proc.stdout.split("\n")[:3]]
    assert rows[0] == [1e-39, 1e-39] or rows[0] == rows[2]
    assert rows[1] == [0.0, 0.0], proc.stdout
    assert rows[2][0] == rows[2][1] > 0, proc.stdout
