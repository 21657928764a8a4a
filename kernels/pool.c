/* Thread pool with spin-then-sleep workers.
 *
 * A decode step dispatches a few hundred small tasks, microseconds apart:
 * waking sleeping threads through the kernel for each would cost more than
 * the task.  So workers spin on a generation counter for a while after each
 * task and only then sleep on a condition variable; the caller spins for
 * completion.
 */
#define _GNU_SOURCE
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
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
    _Atomic unsigned generation;
    _Atomic int pending;
    _Atomic int sleeping;
    _Atomic int stop;
    llk_task task;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    llk_pool *pool;
    int ith;
} worker_arg;

static void *worker(void *p) {
    worker_arg w = *(worker_arg *)p;
    free(p);
    llk_pool *pool = w.pool;
    unsigned seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop) && spins < SPIN_ROUNDS) {
            cpu_relax();
            spins++;
        }
        if (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop)) {
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add(&pool->sleeping, 1);
            while (atomic_load(&pool->generation) == seen && !atomic_load(&pool->stop))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub(&pool->sleeping, 1);
            pthread_mutex_unlock(&pool->mu);
        }
        if (atomic_load(&pool->stop)) return NULL;
        seen = atomic_load(&pool->generation);
        pool->task(pool->arg, w.ith, pool->n);
        atomic_fetch_sub(&pool->pending, 1);
    }
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

void llk_pool_run(llk_pool *pool, llk_task task, void *arg) {
    if (pool->n == 1) {
        task(arg, 0, 1);
        return;
    }
    pool->task = task;
    pool->arg = arg;
    atomic_store(&pool->pending, pool->n - 1);
    atomic_fetch_add(&pool->generation, 1);
    wake(pool);
    task(arg, 0, pool->n);
    for (long spins = 0; atomic_load(&pool->pending) > 0; spins++) {
        if (spins < SPIN_ROUNDS) cpu_relax();
        else sched_yield(); /* a worker was preempted: give it the core */
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
