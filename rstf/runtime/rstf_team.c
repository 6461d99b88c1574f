/* rstf's OpenMP team: the few libgomp entry points that gcc's -fopenmp code for the
 * generated C calls, implemented inside each op library (hidden, so they bind to nothing
 * outside it and nothing outside binds to them).
 *
 * Why not libgomp: libgomp keeps one worker pool per thread that starts a parallel region,
 * and TensorFlow runs an op on whichever of its inter-op threads is free. So the op library
 * used to hand every call to one dedicated thread that started all its regions, and wait
 * for it: on 2 vCPUs that hand-off and the way back cost 40-55 us a call (MobileNet v2's
 * kernels take 3 ms), most of it the dedicated thread waiting for a CPU behind TensorFlow's
 * threads. Here the calling thread itself is thread 0 of the team, whichever thread it is,
 * and the other threads are the library's own workers, shared by every caller. Calls are
 * serialised by the op wrapper (rstf_team_lock), so there is one team at a time.
 *
 * What gcc emits for the generated C (and rstf's batch loop) is all this implements:
 *   GOMP_parallel(fn, data, num_threads, flags)   a parallel region (`parallel`, `parallel
 *                                                 for`, `num_threads(P)`); a nested one runs
 *                                                 on its calling thread alone, as libgomp's
 *                                                 default (one active level) does
 *   GOMP_barrier()                                the barrier that ends `omp for`
 *   GOMP_parallel_loop_nonmonotonic_dynamic(..)   `parallel for schedule(nonmonotonic:
 *   GOMP_loop_nonmonotonic_dynamic_start/next(..) dynamic, K)`, and `omp for` with it in a
 *   GOMP_loop_end(), GOMP_loop_end_nowait()       region: see "Dynamic loops" below
 *   omp_get_thread_num(), omp_get_num_threads(), omp_set_num_threads(), omp_get_max_threads()
 * `schedule(static)` loops and `collapse` are partitioned inline by gcc.
 *
 * Waiting: a worker waits for the next region for RSTF_SPIN_US microseconds after its last
 * one (default 5000, about what libgomp's default spin lasts here; 0 sleeps at once), but
 * no longer than 100 us after the op's call has ended (rstf_idle_enough), then sleeps on a
 * futex; the next region wakes it. Threads waiting at a barrier or for the
 * region's end do not sleep: regions follow each other within microseconds. Every wait
 * spins for about 20 us, then yields the core between looks (rstf_relax).
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RSTF_PAUSE() _mm_pause()
/* The floating-point control word a region runs under: the caller's. TensorFlow runs its
 * kernels with denormals flushed (FTZ and DAZ in MXCSR); workers started before, or by
 * another caller, would otherwise compute denormals slowly, and round them unlike it. */
#define RSTF_FPMODE() (_mm_getcsr() & ~0x3fu) /* less the exception flags */
#define RSTF_SET_FPMODE(m) _mm_setcsr(m)
#else
#define RSTF_PAUSE() ((void)0)
#define RSTF_FPMODE() 0u
#define RSTF_SET_FPMODE(m) ((void)(m))
#endif

#define RSTF_HIDDEN __attribute__((visibility("hidden")))

typedef void (*rstf_region_fn)(void *);

/* The region word: a count bumped when a region starts (the workers' signal, and their
 * futex) in the high 24 bits, the region's team size - 1 in the low 8, so that a worker
 * reads which region and whether it is in it from one load. */
#define RSTF_SIZE_BITS 8
#define RSTF_MAX_THREADS (1 << RSTF_SIZE_BITS)

static struct {
    _Alignas(64) atomic_uint region;
    _Alignas(64) atomic_uint sleepers; /* workers asleep on `region` (futex) */
    _Alignas(64) atomic_uint running;  /* workers still in the current region */
    _Alignas(64) _Atomic uint64_t gate; /* the current region's (see rstf_join) */
    _Alignas(64) atomic_uint arrived;  /* barrier: threads arrived in this phase */
    _Alignas(64) atomic_uint phase;    /* barrier: bumped when all have arrived */
    _Alignas(64) atomic_int in_call;   /* the op wrapper holds the lock (rstf_team_lock) */
    atomic_long call_end_ns;           /* when it last released it */
    _Alignas(64) rstf_region_fn fn;    /* the current region (written before `region`) */
    void *data;
    unsigned fpmode;                   /* its caller's RSTF_FPMODE (written before `region`) */
    int workers;                       /* worker threads started (thread numbers 1..) */
    cpu_set_t allowed;                 /* the CPUs the process may use (see rstf_unstack) */
    int can_move;                      /* more than one of them */
    unsigned wanted;                   /* omp_set_num_threads */
    long spin_ns;
    pthread_mutex_t start_mu;          /* starting workers */
} rstf_team = {.start_mu = PTHREAD_MUTEX_INITIALIZER, .spin_ns = -1};

/* The gate: the region's count (the region word's high bits) above RSTF_GATE_SHIFT, then
 * RSTF_CLOSED, then the number of workers that joined it. A worker joins the region it saw
 * only while that is still the gate's and the gate is open; the starting thread closes the
 * gate of a region whose work all threads share dynamically once none is left, and waits
 * for the workers that joined only (rstf_parallel). */
#define RSTF_CLOSED ((uint64_t)1 << RSTF_SIZE_BITS)
#define RSTF_GATE_SHIFT (RSTF_SIZE_BITS + 1)

static int rstf_join(unsigned count) {
    uint64_t g = atomic_load_explicit(&rstf_team.gate, memory_order_acquire);
    while ((g >> RSTF_GATE_SHIFT) == count && !(g & RSTF_CLOSED))
        if (atomic_compare_exchange_weak_explicit(&rstf_team.gate, &g, g + 1,
                                                  memory_order_acq_rel, memory_order_acquire))
            return 1;
    return 0;
}

static _Thread_local unsigned rstf_tnum;     /* thread number in the current team */
static _Thread_local unsigned rstf_tsize = 1; /* its size; 1 outside any region */
static _Thread_local int rstf_in_region;

/* One step of a wait: a pause for the first RSTF_SPINS steps (about 20 us on a 3-4 GHz
 * core), then a yield. Why: a team larger than the free cores (--threads over the core
 * count, or another process's load) would otherwise spin away the time slice that the thread
 * it waits for needs; a yield with nothing else to run returns at once. */
#define RSTF_SPINS 1024
static inline void rstf_relax(unsigned *step) {
    if (*step < RSTF_SPINS) {
        ++*step;
        RSTF_PAUSE();
    } else {
        sched_yield();
    }
}

static long rstf_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

static void rstf_futex_wait(atomic_uint *addr, unsigned expected) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void rstf_futex_wake_all(atomic_uint *addr) {
    syscall(SYS_futex, (uint32_t *)addr, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

/* Whether a waiting worker should go to sleep: RSTF_SPIN_US after its last region within
 * a call, but RSTF_IDLE_SPIN_NS after the call itself ended. Between two calls TensorFlow
 * works for 50-150 us on one core (MobileNet v2 back to back), and may run other ops on the
 * others: a worker spinning through that takes a core from it. Measured end to end on
 * MobileNet v2 (2 cores, alternating processes): a spin of 30, 50 or 150 us in all ran
 * 0.992-0.998 the time of 5 ms, so sleeping between calls costs nothing there. */
#define RSTF_IDLE_SPIN_NS 100000L
static int rstf_idle_enough(long deadline) {
    const long now = rstf_now_ns();
    if (now > deadline) return 1;
    return !atomic_load_explicit(&rstf_team.in_call, memory_order_relaxed) &&
           now > atomic_load_explicit(&rstf_team.call_end_ns, memory_order_relaxed) +
                     RSTF_IDLE_SPIN_NS;
}

/* Placement. A worker queued on the CPU of the thread that starts the regions (thread 0,
 * the TensorFlow thread that called the op) is of no use there: thread 0 does not give up
 * its CPU while it works, and a dynamic loop's gate lets it run the whole loop alone. Linux
 * puts a woken thread beside the thread that woke it when it judges that cheap, and then
 * may leave it there for milliseconds (measured on MobileNet v2, Zen 4, 2 vCPUs: calls of
 * 6 ms instead of 3, 31-46 of their 47 regions run by thread 0 alone, the worker last seen
 * on thread 0's CPU in 397 of 401 such regions; most often in a process's first calls, and
 * after a long serial op). So each worker notes where it runs, and when a worker has missed a
 * dynamic region, thread 0 moves it off thread 0's CPU if it was last seen there:
 * sched_setaffinity to the process's CPUs less that one (the kernel migrates the worker at
 * once). The worker gives itself the process's CPUs back when it next sees a region, from
 * wherever it was moved to. Measured end to end on MobileNet v2 (10 process pairs of 100
 * calls): calls over 1.4x the median 77 -> 21, the median 1.007x. Checking at every region
 * start instead ran 1.02x slower in the median, and keeping the worker off the CPU until
 * thread 0 moved 1.03x. A region every worker joined costs nothing more.
 *
 * A worker asleep on the futex is the same case, known before it happens: the wake queues
 * it beside the waker whenever Linux judges that cheap, and where it last noted being is
 * then stale, so rstf_unstack would not see it. On a 2-vCPU KVM guest a thread woken after
 * a millisecond asleep ran on its busy waker's CPU in nearly every wake, and the calls that
 * woke the worker (a process's first calls; a server's requests that come apart) ran most
 * of their regions on thread 0 alone. So thread 0 moves every sleeping worker off its CPU
 * before it wakes them (rstf_unstack_sleepers), and starts new workers off it. */
static struct {
    _Alignas(64) atomic_int cpu; /* where the worker last ran; -1 unknown */
    atomic_int tid;              /* its kernel thread id; 0 until it has started */
    atomic_int moved;            /* its affinity excludes a CPU, until it joins a region */
    atomic_int asleep;           /* on the futex, or about to be */
} rstf_place[RSTF_MAX_THREADS];

/* No worker known anywhere: before the first workers start, and in a child of fork(). */
static void rstf_forget_places(void) {
    for (int t = 0; t < RSTF_MAX_THREADS; ++t) {
        atomic_store(&rstf_place[t].tid, 0);
        atomic_store(&rstf_place[t].cpu, -1);
        atomic_store(&rstf_place[t].moved, 0);
        atomic_store(&rstf_place[t].asleep, 0);
    }
}

static void rstf_note_cpu(unsigned me) {
    atomic_store_explicit(&rstf_place[me].cpu, sched_getcpu(), memory_order_relaxed);
}

/* The process's CPUs less `here` in *set; 0 when none is left. */
static int rstf_all_but(int here, cpu_set_t *set) {
    *set = rstf_team.allowed;
    CPU_CLR(here, set);
    return CPU_COUNT(set) > 0;
}

/* Thread 0: move worker t off `here`, its CPU (the process's CPUs less that one; the kernel
 * migrates a running worker at once, and wakes a sleeping one elsewhere). The worker takes
 * the process's CPUs back when it next sees a region. */
static void rstf_move_off(unsigned t, int here) {
    const int tid = atomic_load_explicit(&rstf_place[t].tid, memory_order_relaxed);
    cpu_set_t set;
    if (tid <= 0 || !rstf_all_but(here, &set)) return;
    /* `moved` after the call: a worker that reads it set has been moved, and restores. */
    if (sched_setaffinity(tid, sizeof set, &set) == 0) {
        atomic_store_explicit(&rstf_place[t].moved, 1, memory_order_relaxed);
        atomic_store_explicit(&rstf_place[t].cpu, -1, memory_order_relaxed);
    }
}

/* Thread 0, after a dynamic region that workers of 1..n-1 missed: move those last seen on
 * its CPU off it. */
static void rstf_unstack(unsigned n) {
    if (!rstf_team.can_move) return;
    const int here = sched_getcpu();
    if (here < 0) return;
    for (unsigned t = 1; t < n; ++t)
        if (atomic_load_explicit(&rstf_place[t].cpu, memory_order_relaxed) == here &&
            !atomic_load_explicit(&rstf_place[t].moved, memory_order_relaxed))
            rstf_move_off(t, here);
}

/* Thread 0, about to wake the sleeping workers: move them off its CPU first. */
static void rstf_unstack_sleepers(void) {
    if (!rstf_team.can_move) return;
    const int here = sched_getcpu();
    if (here < 0) return;
    for (int t = 1; t <= rstf_team.workers; ++t)
        if (atomic_load_explicit(&rstf_place[t].asleep, memory_order_relaxed) &&
            !atomic_load_explicit(&rstf_place[t].moved, memory_order_relaxed))
            rstf_move_off((unsigned)t, here);
}

/* arg: the worker's thread number in the low 16 bits, above them the region word when it
 * was started (it runs the regions after that one, whenever the thread gets to run). */
static void *rstf_worker(void *arg) {
    const unsigned me = (unsigned)((uintptr_t)arg & 0xffff);
    unsigned seen = (unsigned)((uintptr_t)arg >> 16);
    atomic_store_explicit(&rstf_place[me].tid, (int)syscall(SYS_gettid), memory_order_relaxed);
    rstf_note_cpu(me);
    for (;;) {
        /* Wait for the next region: spin a while, then sleep. */
        unsigned now = atomic_load_explicit(&rstf_team.region, memory_order_acquire);
        if (now == seen) {
            const long deadline = rstf_now_ns() + rstf_team.spin_ns;
            unsigned step = 0;
            for (int i = 0;; ++i) {
                now = atomic_load_explicit(&rstf_team.region, memory_order_acquire);
                if (now != seen) break;
                if ((i & 63) == 63) {
                    rstf_note_cpu(me);
                    if (rstf_idle_enough(deadline)) {
                        atomic_store_explicit(&rstf_place[me].asleep, 1, memory_order_relaxed);
                        atomic_fetch_add(&rstf_team.sleepers, 1);
                        now = atomic_load_explicit(&rstf_team.region, memory_order_acquire);
                        if (now == seen) rstf_futex_wait(&rstf_team.region, seen);
                        atomic_fetch_sub(&rstf_team.sleepers, 1);
                        atomic_store_explicit(&rstf_place[me].asleep, 0, memory_order_relaxed);
                        continue;
                    }
                }
                rstf_relax(&step);
            }
        }
        seen = now;
        const unsigned size = (now & (RSTF_MAX_THREADS - 1)) + 1;
        rstf_note_cpu(me);
        if (atomic_load_explicit(&rstf_place[me].moved, memory_order_relaxed)) {
            /* Moved off thread 0's CPU (rstf_unstack), and running elsewhere now. */
            sched_setaffinity(0, sizeof rstf_team.allowed, &rstf_team.allowed);
            atomic_store_explicit(&rstf_place[me].moved, 0, memory_order_relaxed);
        }
        if (me < size && rstf_join(now >> RSTF_SIZE_BITS)) {
            if (RSTF_FPMODE() != rstf_team.fpmode) RSTF_SET_FPMODE(rstf_team.fpmode);
            rstf_tnum = me;
            rstf_tsize = size;
            rstf_in_region = 1;
            rstf_team.fn(rstf_team.data);
            rstf_in_region = 0;
            atomic_fetch_sub_explicit(&rstf_team.running, 1, memory_order_release);
        }
    }
    return NULL;
}

/* The op wrapper's lock around a call: one team at a time in this library. */
static pthread_mutex_t rstf_call_mu = PTHREAD_MUTEX_INITIALIZER;

/* In a child of fork() only the forking thread exists: no workers, and whatever another
 * thread held when it forked (the call lock, during a call; the start lock) as new. A call
 * that was running in the parent does not go on in the child; the child's first region
 * sets the region's gate and barrier afresh, and starts workers of its own. */
static void rstf_after_fork_child(void) {
    rstf_team.workers = 0;
    rstf_forget_places(); /* (the parent's thread ids: rstf_unstack must not move them) */
    atomic_store(&rstf_team.sleepers, 0);
    atomic_store(&rstf_team.running, 0);
    atomic_store(&rstf_team.in_call, 0);
    pthread_mutex_init(&rstf_team.start_mu, NULL);
    pthread_mutex_init(&rstf_call_mu, NULL);
}

/* Registered when the library is loaded, not when its first workers start: a call on one
 * thread starts none, yet holds the call lock, and a child forked during it would wait for
 * that lock forever. No `prepare` handler: taking the call lock there would make fork()
 * wait for a running call (and deadlock a thread that forks inside one), while the child
 * needs none of that call's state. */
__attribute__((constructor)) static void rstf_team_at_load(void) {
    pthread_atfork(NULL, NULL, rstf_after_fork_child);
}

/* Start workers up to thread number n - 1; returns the team size it can have. */
static unsigned rstf_start_workers(unsigned n) {
    if (n > RSTF_MAX_THREADS) n = RSTF_MAX_THREADS;
    if ((int)n - 1 <= rstf_team.workers) return n;
    pthread_mutex_lock(&rstf_team.start_mu);
    if (rstf_team.spin_ns < 0) { /* the first workers */
        const char *s = getenv("RSTF_SPIN_US");
        const long us = s && *s ? strtol(s, NULL, 10) : 5000;
        rstf_team.spin_ns = (us < 0 ? 0 : us) * 1000L;
        rstf_team.can_move = sched_getaffinity(0, sizeof rstf_team.allowed,
                                               &rstf_team.allowed) == 0 &&
                             CPU_COUNT(&rstf_team.allowed) > 1;
        rstf_forget_places();
    }
    while (rstf_team.workers < (int)n - 1) {
        pthread_t t;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        /* Started off this thread's CPU, as a sleeping worker is woken (see Placement): a
         * new thread too may be queued beside its creator, before it has run to note it. */
        const int here = rstf_team.can_move ? sched_getcpu() : -1;
        cpu_set_t set;
        if (here >= 0 && rstf_all_but(here, &set) &&
            pthread_attr_setaffinity_np(&attr, sizeof set, &set) == 0)
            atomic_store(&rstf_place[rstf_team.workers + 1].moved, 1);
        const uintptr_t word = atomic_load(&rstf_team.region);
        int rc = pthread_create(&t, &attr, rstf_worker,
                                (void *)(word << 16 | (uintptr_t)(rstf_team.workers + 1)));
        pthread_attr_destroy(&attr);
        if (rc != 0) break; /* no more threads: a smaller team */
        ++rstf_team.workers;
    }
    pthread_mutex_unlock(&rstf_team.start_mu);
    return (unsigned)rstf_team.workers + 1 < n ? (unsigned)rstf_team.workers + 1 : n;
}

/* Dynamic loops. The generated C marks its parallel loops `schedule(nonmonotonic: dynamic,
 * K)`, and the team runs them as static loops that balance themselves: the loop's chunks of
 * K iterations are split into one contiguous range per thread, as `static` would split them,
 * and each thread takes chunks from the front of its own range (an uncontended
 * compare-and-swap on its own cache line). A thread whose range is empty steals the back
 * half of the largest range left, and goes on from there.
 *
 * Why: the cores of a shared host run at different speeds from one moment to the next
 * (measured on a 2-vCPU cloud host: one core at half its FMA rate for seconds while the
 * other ran at full), and a static loop lasts as long as its slowest thread's share.
 * Stealing lets the other thread take over the rest, while a balanced run keeps `static`'s
 * placement: each thread works on the same rows in every loop, so what one loop wrote stays
 * in that core's L2 for the next. libgomp's plain dynamic schedule hands chunks out in order
 * from one shared counter, which loses that placement (MobileNet v2's kernels 4-15% slower
 * than static). Nonmonotonic allows any order of chunks (OpenMP 5.0, 2.9.2). The generated
 * C asks for it only with RSTF_TEAM defined (its RSTF_SCHEDULE macro): static otherwise.
 *
 * A range is one 64-bit word, its first chunk in the high half and its end in the low
 * half; the owner takes the first chunk, a thief moves the end down. */
struct rstf_loop {
    long start, incr, iters, chunk; /* iterations start, start + incr, ..; chunk of them */
};
static struct rstf_loop rstf_top;   /* the team's current loop */
static struct {
    _Alignas(64) _Atomic uint64_t range;
} rstf_share[RSTF_MAX_THREADS];
/* A loop its thread runs alone (a nested region, or a team of one): the next iteration. */
static _Thread_local struct {
    int active;
    long next, end, incr;
} rstf_alone;

#define RSTF_RANGE(lo, hi) ((uint64_t)(lo) << 32 | (uint32_t)(hi))
#define RSTF_LO(r) ((uint32_t)((r) >> 32))
#define RSTF_HI(r) ((uint32_t)(r))

static struct rstf_loop rstf_loop_of(long start, long end, long incr, long chunk) {
    struct rstf_loop l = {start, incr, 0, chunk > 0 ? chunk : 1};
    if (incr > 0 && end > start) l.iters = (end - start + incr - 1) / incr;
    if (incr < 0 && end < start) l.iters = (start - end - incr - 1) / -incr;
    return l;
}

/* Split the team's loop `l` among n threads: thread t's chunks as `static` would give. */
static void rstf_share_out(struct rstf_loop l, unsigned n) {
    long chunks = (l.iters + l.chunk - 1) / l.chunk;
    if (chunks > UINT32_MAX) { /* (4 G chunks: larger chunks, the same iterations) */
        l.chunk = (l.iters + UINT32_MAX - 1) / UINT32_MAX;
        chunks = (l.iters + l.chunk - 1) / l.chunk;
    }
    rstf_top = l;
    for (unsigned t = 0; t < n; ++t)
        atomic_store_explicit(&rstf_share[t].range,
                              RSTF_RANGE(chunks * t / n, chunks * (t + 1) / n),
                              memory_order_relaxed);
}

/* The calling thread's next chunk of the team's loop, or -1 when none is left. */
static long rstf_next_chunk(void) {
    const unsigned me = rstf_tnum, n = rstf_tsize;
    _Atomic uint64_t *own = &rstf_share[me].range;
    uint64_t r = atomic_load_explicit(own, memory_order_relaxed);
    while (RSTF_LO(r) < RSTF_HI(r))
        if (atomic_compare_exchange_weak_explicit(own, &r, RSTF_RANGE(RSTF_LO(r) + 1, RSTF_HI(r)),
                                                  memory_order_relaxed, memory_order_relaxed))
            return RSTF_LO(r);
    for (;;) { /* steal the back half of the largest range left */
        unsigned victim = me;
        uint32_t most = 0;
        for (unsigned t = 0; t < n; ++t) {
            const uint64_t v = atomic_load_explicit(&rstf_share[t].range, memory_order_relaxed);
            if (t != me && RSTF_HI(v) - RSTF_LO(v) > most && RSTF_LO(v) < RSTF_HI(v))
                most = RSTF_HI(v) - RSTF_LO(v), victim = t;
        }
        if (victim == me) return -1;
        uint64_t v = atomic_load_explicit(&rstf_share[victim].range, memory_order_relaxed);
        const uint32_t lo = RSTF_LO(v), hi = RSTF_HI(v);
        if (lo >= hi) continue;
        const uint32_t mid = lo + (hi - lo) / 2; /* the thief's: [mid, hi), at least one */
        if (atomic_compare_exchange_strong_explicit(&rstf_share[victim].range, &v,
                                                    RSTF_RANGE(lo, mid), memory_order_relaxed,
                                                    memory_order_relaxed)) {
            /* Our own range was empty, so no thief touches it until this store. */
            atomic_store_explicit(own, RSTF_RANGE(mid + 1, hi), memory_order_relaxed);
            return mid;
        }
    }
}

RSTF_HIDDEN int GOMP_loop_nonmonotonic_dynamic_next(long *istart, long *iend) {
    if (rstf_alone.active) { /* alone: everything left at once */
        if (rstf_alone.incr > 0 ? rstf_alone.next >= rstf_alone.end
                                : rstf_alone.next <= rstf_alone.end)
            return 0;
        *istart = rstf_alone.next, *iend = rstf_alone.end;
        rstf_alone.next = rstf_alone.end;
        return 1;
    }
    const long c = rstf_next_chunk();
    if (c < 0) return 0;
    const struct rstf_loop *l = &rstf_top;
    const long first = c * l->chunk, last = first + l->chunk < l->iters ? first + l->chunk
                                                                        : l->iters;
    *istart = l->start + first * l->incr;
    *iend = l->start + last * l->incr;
    return 1;
}

RSTF_HIDDEN void GOMP_barrier(void);

/* `omp for schedule(nonmonotonic: dynamic, K)` in a region: every thread of the team calls
 * this. The first barrier waits for all to have left the previous loop (which may have
 * ended `nowait`), the second for thread 0 to have shared this one out. */
RSTF_HIDDEN int GOMP_loop_nonmonotonic_dynamic_start(long start, long end, long incr,
                                                     long chunk, long *istart, long *iend) {
    if (rstf_tsize <= 1) {
        rstf_alone.active = 1;
        rstf_alone.next = start, rstf_alone.end = end, rstf_alone.incr = incr;
    } else {
        GOMP_barrier();
        if (rstf_tnum == 0) rstf_share_out(rstf_loop_of(start, end, incr, chunk), rstf_tsize);
        GOMP_barrier();
    }
    return GOMP_loop_nonmonotonic_dynamic_next(istart, iend);
}

RSTF_HIDDEN void GOMP_loop_end_nowait(void) { rstf_alone.active = 0; }

RSTF_HIDDEN void GOMP_loop_end(void) {
    rstf_alone.active = 0;
    GOMP_barrier();
}

static void rstf_parallel(rstf_region_fn fn, void *data, unsigned num_threads,
                          const struct rstf_loop *loop);

RSTF_HIDDEN void GOMP_parallel(rstf_region_fn fn, void *data, unsigned num_threads,
                               unsigned flags) {
    (void)flags;
    rstf_parallel(fn, data, num_threads, NULL);
}

RSTF_HIDDEN void GOMP_parallel_loop_nonmonotonic_dynamic(rstf_region_fn fn, void *data,
                                                         unsigned num_threads, long start,
                                                         long end, long incr, long chunk,
                                                         unsigned flags) {
    (void)flags;
    const struct rstf_loop loop = rstf_loop_of(start, end, incr, chunk);
    rstf_parallel(fn, data, num_threads, &loop);
}

/* A region of num_threads (0: omp_set_num_threads') threads running fn; with `loop`, the
 * team's dynamic loop, shared out before the workers start. */
static void rstf_parallel(rstf_region_fn fn, void *data, unsigned num_threads,
                          const struct rstf_loop *loop) {
    unsigned n = num_threads ? num_threads : (rstf_team.wanted ? rstf_team.wanted : 1);
    if (rstf_in_region || n <= 1) {
        /* Nested (or one thread): the calling thread alone, as thread 0 of a team of 1. */
        const unsigned tnum = rstf_tnum, tsize = rstf_tsize;
        const int in = rstf_in_region;
        const __typeof__(rstf_alone) alone = rstf_alone; /* its enclosing loop's, if any */
        rstf_alone.active = loop != NULL;
        if (loop) {
            rstf_alone.next = loop->start;
            rstf_alone.end = loop->start + loop->iters * loop->incr;
            rstf_alone.incr = loop->incr;
        }
        rstf_tnum = 0, rstf_tsize = 1, rstf_in_region = 1;
        fn(data);
        rstf_tnum = tnum, rstf_tsize = tsize, rstf_in_region = in;
        rstf_alone = alone;
        return;
    }
    n = rstf_start_workers(n);
    if (loop) rstf_share_out(*loop, n);
    rstf_team.fn = fn;
    rstf_team.data = data;
    rstf_team.fpmode = RSTF_FPMODE();
    atomic_store_explicit(&rstf_team.arrived, 0, memory_order_relaxed);
    atomic_store_explicit(&rstf_team.running, n - 1, memory_order_relaxed);
    const unsigned word = atomic_load_explicit(&rstf_team.region, memory_order_relaxed);
    const unsigned count = (word >> RSTF_SIZE_BITS) + 1;
    atomic_store_explicit(&rstf_team.gate, (uint64_t)(count & ((1u << (32 - RSTF_SIZE_BITS)) - 1))
                                               << RSTF_GATE_SHIFT, memory_order_relaxed);
    /* seq_cst, as is the load of `sleepers` after it: a worker going to sleep either sees
     * the new word or is seen and woken (it counts itself before its last look). */
    atomic_store(&rstf_team.region, count << RSTF_SIZE_BITS | (n - 1));
    if (atomic_load(&rstf_team.sleepers)) {
        rstf_unstack_sleepers();
        rstf_futex_wake_all(&rstf_team.region);
    }
    rstf_tnum = 0, rstf_tsize = n, rstf_in_region = 1;
    fn(data);
    rstf_tnum = 0, rstf_tsize = 1, rstf_in_region = 0;
    if (loop) {
        /* The loop's chunks are all taken: a worker that has not joined yet (its core taken
         * by the hypervisor or another thread, or still waking up) has nothing left to do
         * and must not be waited for. Close the gate; count out those that did not join. */
        const uint64_t g = atomic_fetch_or_explicit(&rstf_team.gate, RSTF_CLOSED,
                                                    memory_order_acq_rel);
        const unsigned joined = (unsigned)(g & (RSTF_CLOSED - 1));
        if (joined < n - 1) {
            atomic_fetch_sub_explicit(&rstf_team.running, n - 1 - joined, memory_order_relaxed);
            rstf_unstack(n); /* a worker stuck behind this thread misses the next ones too */
        }
    }
    /* Workers past the team's size skip the region; wait for the others. */
    unsigned step = 0;
    while (atomic_load_explicit(&rstf_team.running, memory_order_acquire) != 0)
        rstf_relax(&step);
}

RSTF_HIDDEN void GOMP_barrier(void) {
    const unsigned n = rstf_tsize;
    if (n <= 1) return;
    const unsigned phase = atomic_load_explicit(&rstf_team.phase, memory_order_acquire);
    if (atomic_fetch_add_explicit(&rstf_team.arrived, 1, memory_order_acq_rel) == n - 1) {
        atomic_store_explicit(&rstf_team.arrived, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&rstf_team.phase, 1, memory_order_release);
        return;
    }
    unsigned step = 0;
    while (atomic_load_explicit(&rstf_team.phase, memory_order_acquire) == phase)
        rstf_relax(&step);
}

RSTF_HIDDEN int omp_get_thread_num(void) { return (int)rstf_tnum; }
RSTF_HIDDEN int omp_get_num_threads(void) { return (int)rstf_tsize; }
RSTF_HIDDEN void omp_set_num_threads(int n) { rstf_team.wanted = n > 0 ? (unsigned)n : 1; }
RSTF_HIDDEN int omp_get_max_threads(void) {
    return rstf_team.wanted ? (int)rstf_team.wanted : 1;
}

RSTF_HIDDEN void rstf_team_lock(void) {
    pthread_mutex_lock(&rstf_call_mu);
    atomic_store_explicit(&rstf_team.in_call, 1, memory_order_relaxed);
}

RSTF_HIDDEN void rstf_team_unlock(void) {
    atomic_store_explicit(&rstf_team.call_end_ns, rstf_now_ns(), memory_order_relaxed);
    atomic_store_explicit(&rstf_team.in_call, 0, memory_order_relaxed);
    pthread_mutex_unlock(&rstf_call_mu);
}
