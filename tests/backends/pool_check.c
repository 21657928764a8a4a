/* The thread pool under churn: many short jobs of changing sizes, on more threads than cores so that the
 * scheduler stops workers at any instruction. Every item of every job must run exactly once, and none
 * after llk_pool_run returned (its caller has moved on: the job's arguments are gone).
 *   pool_check THREADS JOBS   prints the faults found; exits non-zero if there is any. */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../kernels/pool.h"

#define MAX_ITEMS 64

typedef struct {
    _Atomic int ran[MAX_ITEMS];
    _Atomic int returned; /* set once llk_pool_run returned */
} job_state;

static _Atomic long late;

static void task(void *arg, int item, int ith) {
    (void)ith;
    job_state *s = arg;
    if (atomic_load(&s->returned)) atomic_fetch_add(&late, 1);
    atomic_fetch_add(&s->ran[item], 1);
}

int main(int argc, char **argv) {
    const int n_threads = argc > 1 ? atoi(argv[1]) : 4, n_jobs = argc > 2 ? atoi(argv[2]) : 300000;
    llk_pool *pool = llk_pool_new(n_threads);
    static job_state states[2]; /* a job's state is reused two jobs later, as a caller's stack would be */
    long wrong = 0;
    for (int j = 0; j < n_jobs; j++) {
        job_state *s = &states[j & 1];
        memset(s, 0, sizeof *s);
        /* small jobs after large ones and the reverse: a worker that read a finished job's ticket must not
         * take the next job's larger item count for it */
        const int n = j % 3 == 0 ? 2 : j % 3 == 1 ? MAX_ITEMS : 3 + j % 17;
        llk_pool_run(pool, task, s, n);
        atomic_store(&s->returned, 1);
        for (int i = 0; i < MAX_ITEMS; i++) wrong += atomic_load(&s->ran[i]) != (i < n);
    }
    llk_pool_free(pool);
    printf("%d jobs on %d threads: %ld items ran other than once, %ld after their job returned\n", n_jobs,
           n_threads, wrong, atomic_load(&late));
    return wrong || atomic_load(&late);
}
