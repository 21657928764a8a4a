/* Thread pool with spin-then-sleep workers and items taken by whoever comes first.
 *
 * A decode step dispatches a few hundred small jobs, microseconds apart:
 * waking sleeping threads through the kernel for each would cost more than
 * the job.  So workers spin on the job ticket for a while after each job and
 * only then sleep on a condition variable.
 *
 * The caller waits for the job's items, not for the workers: on a machine whose
 * cores other processes share, a worker that is not running when a job starts
 * (preempted, or asleep) leaves its items to the threads that are, instead of
 * holding the caller until the scheduler gives it a core.  A worker takes an
 * item by a compare-and-swap of the ticket (the job's number and its next item),
 * so one that wakes late can never take an item of a later job for the job whose
 * task it read.
 */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ROUNDS 20000

struct llk_pool {
    int n;
    pthread_t *threads;
    _Atomic uint64_t ticket; /* job number << 32 | the next item to take */
    _Atomic(llk_task) task;  /* the current job's (written only while no item of the last one is left) */
    _Atomic(void *) arg;
    _Atomic int n_items;
    _Atomic uint64_t ahead;  /* the bytes to read once out of items: address << AHEAD_LEN_BITS | cache lines */
    _Atomic int done;        /* items of the current job finished */
    _Atomic int sleeping;
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    llk_pool *pool;
    int ith;
} worker_arg;

/* Take and run the items of job `job` that are left; returns when none is. */
static void take_items(llk_pool *pool, uint32_t job, int ith) {
    for (;;) {
        uint64_t t = atomic_load(&pool->ticket);
        if ((uint32_t)(t >> 32) != job) return;
        llk_task task = atomic_load_explicit(&pool->task, memory_order_relaxed);
        void *arg = atomic_load_explicit(&pool->arg, memory_order_relaxed);
        int n_items = atomic_load_explicit(&pool->n_items, memory_order_relaxed);
        int item = (int)(uint32_t)t;
        if (item >= n_items) return;
        /* the ticket unchanged since those loads: they are this job's. The next job's are written only
         * after this one's ticket is closed (llk_pool_run_ahead), which fails this exchange. */
        if (!atomic_compare_exchange_weak(&pool->ticket, &t, t + 1)) continue;
        task(arg, item, ith);
        atomic_fetch_add(&pool->done, 1);
    }
}

/* Read job `job`'s bytes ahead, a slice at a time, until they are read or another job starts. The region
 * is one word, so that the address of one job's region never meets the length of another's. */
#define AHEAD_LEN_BITS 17 /* up to 8 MiB of 64-byte lines; user addresses fit the 47 bits left */
#define AHEAD_SLICE 4096
static void read_ahead(llk_pool *pool, uint32_t job) {
    const uint64_t region = atomic_load_explicit(&pool->ahead, memory_order_relaxed);
    const char *p = (const char *)(uintptr_t)(region >> AHEAD_LEN_BITS);
    const size_t n = (size_t)(region & ((1u << AHEAD_LEN_BITS) - 1)) * 64;
    uint64_t sum = 0;
    for (size_t at = 0; p && at < n; at += AHEAD_SLICE) {
        if ((uint32_t)(atomic_load(&pool->ticket) >> 32) != job) break;
        const size_t end = at + AHEAD_SLICE < n ? at + AHEAD_SLICE : n;
        for (size_t i = at; i < end; i += 64) sum += *(const volatile uint8_t *)(p + i);
    }
    (void)sum;
}

static void *worker(void *p) {
    worker_arg w = *(worker_arg *)p;
    free(p);
    llk_pool *pool = w.pool;
    uint32_t seen = 0;
#define NEW_JOB() ((uint32_t)(atomic_load(&pool->ticket) >> 32) != seen)
    for (;;) {
        for (int spins = 0; !NEW_JOB() && !atomic_load(&pool->stop) && spins < SPIN_ROUNDS; spins++) cpu_relax();
        if (!NEW_JOB() && !atomic_load(&pool->stop)) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleeping, 1);
            while (!NEW_JOB() && !atomic_load(&pool->stop)) pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = (uint32_t)(atomic_load(&pool->ticket) >> 32);
        take_items(pool, seen, w.ith);
        read_ahead(pool, seen);
    }
#undef NEW_JOB
}

llk_pool *llk_pool_new(int n_threads) {
    llk_pool *pool = calloc(1, sizeof *pool);
    if (!pool) return NULL;
    pool->n = n_threads < 1 ? 1 : n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
    pool->threads = calloc((size_t)pool->n, sizeof(pthread_t));
    if (!pool->threads) {
        free(pool);
        return NULL;
    }
    for (int i = 1; i < pool->n; i++) {
        worker_arg *w = malloc(sizeof *w);
        if (w) *w = (worker_arg){pool, i};
        if (!w || pthread_create(&pool->threads[i], NULL, worker, w) != 0) {
            free(w);
            pool->n = i; /* run with the threads we got */
            break;
        }
    }
    return pool;
}

int llk_pool_size(const llk_pool *pool) { return pool->n; }

static void wake(llk_pool *pool) {
    if (atomic_load(&pool->sleeping) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
}

void llk_pool_run(llk_pool *pool, llk_task task, void *arg, int n_items) {
    llk_pool_run_ahead(pool, task, arg, n_items, NULL, 0);
}

void llk_pool_run_ahead(llk_pool *pool, llk_task task, void *arg, int n_items, const void *ahead, size_t n) {
    if (pool->n == 1 || n_items <= 1) {
        for (int i = 0; i < n_items; i++) task(arg, i, 0);
        return;
    }
    /* Every item of the last job is taken and done, but a worker may have read its ticket (offering the
     * item after its last) and not yet this job's parameters: with this job's larger n_items it would
     * take that item for the old ticket, before the ticket moves, and run it with whichever task and
     * argument it read, while its count of it lands in this job's. So the last ticket is closed first:
     * it offers no item to those who read it now, and fails the exchange of those who read it before. */
    const uint32_t job = (uint32_t)(atomic_load(&pool->ticket) >> 32) + 1;
    atomic_store(&pool->ticket, (uint64_t)(job - 1) << 32 | INT32_MAX);
    atomic_thread_fence(memory_order_seq_cst);
    atomic_store_explicit(&pool->task, task, memory_order_relaxed);
    atomic_store_explicit(&pool->arg, arg, memory_order_relaxed);
    atomic_store_explicit(&pool->n_items, n_items, memory_order_relaxed);
    const uint64_t at = (uint64_t)(uintptr_t)ahead, lines = n / 64, most = (1u << AHEAD_LEN_BITS) - 1;
    atomic_store_explicit(&pool->ahead, ahead && lines && !(at >> (64 - AHEAD_LEN_BITS))
                                            ? at << AHEAD_LEN_BITS | (lines < most ? lines : most) : 0,
                          memory_order_relaxed);
    atomic_store(&pool->done, 0);
    atomic_store(&pool->ticket, (uint64_t)job << 32); /* publishes the job (sequentially consistent) */
    wake(pool);
    take_items(pool, job, 0);
    for (long spins = 0; atomic_load(&pool->done) < n_items; spins++) {
        if (spins < SPIN_ROUNDS) cpu_relax();
        else sched_yield(); /* a worker was preempted inside an item: give it the core */
    }
}

void llk_pool_free(llk_pool *pool) {
    if (!pool) return;
    atomic_store(&pool->stop, 1);
    pthread_mutex_lock(&pool->mu);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->n; i++) pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
}
