/* A fixed thread pool: the caller and n-1 workers share the items of one job. */
#ifndef LLK_POOL_H
#define LLK_POOL_H

#include <stddef.h>

/* Item `item` of a job, run by thread ith (0: the caller; each thread's ith is its own, for scratch). */
typedef void (*llk_task)(void *arg, int item, int ith);
typedef struct llk_pool llk_pool;

llk_pool *llk_pool_new(int n_threads);
void llk_pool_free(llk_pool *pool);
int llk_pool_size(const llk_pool *pool);
/* Run task(arg, i, ith) once for each item i < n_items, items taken by whichever thread comes first;
 * returns when all are done. */
void llk_pool_run(llk_pool *pool, llk_task task, void *arg, int n_items);
/* llk_pool_run, and bytes [ahead, ahead + n) that the caller reads next: a worker left with no item of
 * this job reads them into the caches until the next job starts (while the last items finish and the
 * caller takes the steps between jobs alone), so that the next job finds them there. */
void llk_pool_run_ahead(llk_pool *pool, llk_task task, void *arg, int n_items, const void *ahead, size_t n);

#endif
