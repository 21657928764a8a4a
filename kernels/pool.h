/* A fixed thread pool: the caller and n-1 workers run one task together. */
#ifndef LLK_POOL_H
#define LLK_POOL_H

typedef void (*llk_task)(void *arg, int ith, int nth);
typedef struct llk_pool llk_pool;

llk_pool *llk_pool_new(int n_threads);
void llk_pool_free(llk_pool *pool);
int llk_pool_size(const llk_pool *pool);
/* Run task(arg, i, n) on every thread i (the caller is thread 0); returns when all are done. */
void llk_pool_run(llk_pool *pool, llk_task task, void *arg);

#endif
