/* A fixed thread pool: the caller and n-1 workers share the items of one job. */
#ifndef LLK_POOL_H
#define LLK_POOL_H

/* Item `item` of a job, run by thread ith (0: the caller; each thread's ith is its own, for scratch). */
typedef void (*llk_task)(void *arg, int item, int ith);
typedef struct llk_pool llk_pool;

llk_pool *llk_pool_new(int n_threads);
void llk_pool_free(llk_pool *pool);
int llk_pool_size(const llk_pool *pool);
/* Run task(arg, i, ith) once for each item i < n_items, items taken by whichever thread comes first;
 * returns when all are done. */
void llk_pool_run(llk_pool *pool, llk_task task, void *arg, int n_items);

#endif
