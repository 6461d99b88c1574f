"""fork() while another thread is inside an op library's call: the child must be able to make
calls of its own. Only the forking thread exists in a child, so whatever another thread held
at that moment (the call lock of rstf's OpenMP team, rstf/runtime/rstf_team.c; the queue and the
master thread of OmpMaster, the runtime of libraries without the team, rstf_kernel.h) must be
reset there, or the child's first call waits forever.

A C driver loads the library (dlopen, as TensorFlow does), makes calls on ONE thread in a loop
on a second thread (no worker thread is ever started in the parent), and forks 30 times from
the main thread meanwhile; each child makes a call on 1 and then on 2 threads (starting its
own workers) and checks the results. The driver prints how many children finished in time and
kills the others, so a hang fails the test instead of hanging the suite."""
from __future__ import annotations

import os
import subprocess

import pytest

from rstf.build.compiler import CUSTOM_OPS_DIR, compile_c_shared, tf_flags

CHILDREN = 30

DRIVER = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef void (*call_t)(int threads, const float *a, float *b, int n, int reps);
enum { CHILDREN = %(children)d, N = 4096 };
static call_t call;
static atomic_int stop, calls;

/* A call of `reps` parallel loops b[i] = 2 a[i] + 1; 0 if b is right. The caller's own
 * buffers: no malloc here while the children fork (a sanitizer's allocator, unlike glibc's,
 * may stay locked in a child forked while another thread is inside it). */
static int one_call(int threads, int reps, float *a, float *b) {
    for (int i = 0; i < N; ++i) a[i] = (float)i, b[i] = -1.0f;
    call(threads, a, b, N, reps);
    int wrong = 0;
    for (int i = 0; i < N; ++i) wrong |= b[i] != 2.0f * i + 1.0f;
    return wrong;
}

static void *caller(void *arg) {
    (void)arg;
    static float a[N], b[N];
    while (!atomic_load(&stop)) {
        /* Long calls: the lock is held nearly all the time. */
        if (one_call(1, 2000, a, b)) { printf("wrong result in the parent\n"); exit(1); }
        atomic_fetch_add(&calls, 1);
    }
    return NULL;
}

static long now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000L + t.tv_nsec / 1000000L;
}

int main(int argc, char **argv) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) { printf("dlopen: %%s\n", dlerror()); return 1; }
    call = (call_t)dlsym(h, "rstf_test_call");
    if (!call) { printf("no rstf_test_call\n"); return 1; }
    pthread_t t;
    pthread_create(&t, NULL, caller, NULL);
    while (atomic_load(&calls) < 10) usleep(100);
    pid_t pids[CHILDREN];
    for (int k = 0; k < CHILDREN; ++k) {
        usleep(500 + 97 * k %% 1000);  /* the caller is somewhere in a call, or between two */
        pids[k] = fork();
        if (pids[k] == 0) {
            static float a[N], b[N];
            const int wrong = one_call(1, 1, a, b) || one_call(2, 10, a, b) ||
                              one_call(1, 1, a, b);
            _exit(wrong ? 2 : 0);
        }
        if (pids[k] < 0) { printf("fork failed\n"); return 1; }
    }
    int finished = 0, failed = 0, left = CHILDREN;
    const long deadline = now_ms() + %(wait_ms)d;
    while (left > 0 && now_ms() < deadline) {
        for (int k = 0; k < CHILDREN; ++k) {
            int status;
            if (pids[k] > 0 && waitpid(pids[k], &status, WNOHANG) == pids[k]) {
                pids[k] = 0, --left;
                if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++finished; else ++failed;
            }
        }
        usleep(1000);
    }
    for (int k = 0; k < CHILDREN; ++k)
        if (pids[k] > 0) { kill(pids[k], SIGKILL); waitpid(pids[k], NULL, 0); }
    atomic_store(&stop, 1);
    pthread_join(t, NULL);
    static float a[N], b[N];
    const int parent_ok = one_call(2, 10, a, b) == 0;  /* the parent, on its own workers */
    printf("finished %%d of %%d children (%%d failed, %%d hung); parent %%s\n", finished,
           CHILDREN, failed, left, parent_ok ? "ok" : "wrong");
    return finished == CHILDREN && parent_ok ? 0 : 1;
}
"""

# The work of a call: a parallel loop as the generated C has them (dynamic schedule on the
# team, libgomp's on OmpMaster's master thread).
LOOP = r"""
static void kernel(const float *a, float *b, int n, int reps) {
    for (int r = 0; r < reps; ++r) {
        #pragma omp parallel for schedule(nonmonotonic: dynamic, 64)
        for (int i = 0; i < n; ++i) b[i] = 2.0f * a[i] + 1.0f;
    }
}
"""

# With the team: what the op wrapper does around a call (rstf_call_begin: the team's lock).
TEAM_LIBRARY = LOOP + r"""
void rstf_call_begin(int threads);
void rstf_call_end(void);
__attribute__((visibility("default")))
void rstf_test_call(int threads, const float *a, float *b, int n, int reps) {
    rstf_call_begin(threads);
    kernel(a, b, n, reps);
    rstf_call_end();
}
"""

# Without the team: the op wrapper's rstf::RunKernels on OmpMaster, with libgomp.
MASTER_LIBRARY = r"""
#include "rstf_kernel.h"
#include <omp.h>
extern "C" {
""" + LOOP + r"""
__attribute__((visibility("default")))
void rstf_test_call(int threads, const float *a, float *b, int n, int reps) {
    rstf::RunKernels([&] {
        omp_set_num_threads(threads);
        kernel(a, b, n, reps);
    });
}
}
"""


def _driver(d) -> str:
    src, exe = d / "driver.c", d / "driver"
    src.write_text(DRIVER % {"children": CHILDREN, "wait_ms": 20000})
    subprocess.run(["gcc", "-O2", "-std=c11", str(src), "-o", str(exe), "-pthread", "-ldl"],
                   check=True)
    return str(exe)


def _run_driver(d, lib: str, env: dict | None = None) -> None:
    proc = subprocess.run([_driver(d), lib], capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert f"finished {CHILDREN} of {CHILDREN} children" in proc.stdout


def test_fork_during_a_call_on_the_team(tmp_path):
    lib = str(tmp_path / "team.so")
    compile_c_shared(TEAM_LIBRARY, lib, team=True)
    _run_driver(tmp_path, lib)


@pytest.mark.tfbuild
def test_fork_during_a_call_on_omp_master(tmp_path):
    src, lib = tmp_path / "master.cc", str(tmp_path / "master.so")
    src.write_text(MASTER_LIBRARY)
    cflags, lflags = tf_flags()
    lib_dir = next(f[2:] for f in lflags if f.startswith("-L"))
    # As rstf/build/compiler.py compiles the wrapper of a library without the team (-fopenmp: the
    # loop's libgomp), plus an rpath so that the driver finds TensorFlow's framework library.
    subprocess.run(["g++", "-O2", "-fPIC", "-w", "-shared", "-fopenmp", "-I", CUSTOM_OPS_DIR,
                    *cflags, str(src), "-o", lib, *lflags, f"-Wl,-rpath,{lib_dir}"],
                   check=True)
    # Without a sanitizer's runtime (RSTF_SANITIZE=1's LD_PRELOAD; this library is not
    # sanitized): libgomp allocates in every region, on the master thread, and a child forked
    # meanwhile would wait for the sanitizer allocator's lock, whatever rstf does.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    _run_driver(tmp_path, lib, env)
