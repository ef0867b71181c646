/* Function tables filled by dlsym, and the calls through them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "shim.h"

#define NCCL_SYMBOLS(X) \
	X(ncclGetVersion, gr_result, (int *)) \
	X(ncclGetUniqueId, gr_result, (gr_unique_id *)) \
	X(ncclCommInitRank, gr_result, (gr_comm *, int, gr_unique_id, int)) \
	X(ncclCommDestroy, gr_result, (gr_comm)) \
	X(ncclCommAbort, gr_result, (gr_comm)) \
	X(ncclCommGetAsyncError, gr_result, (gr_comm, gr_result *)) \
	X(ncclGetErrorString, const char *, (gr_result)) \
	X(ncclAllReduce, gr_result, (const void *, void *, size_t, int, int, gr_comm, gr_stream)) \
	X(ncclAllGather, gr_result, (const void *, void *, size_t, int, gr_comm, gr_stream)) \
	X(ncclReduceScatter, gr_result, (const void *, void *, size_t, int, int, gr_comm, gr_stream)) \
	X(ncclBroadcast, gr_result, (const void *, void *, size_t, int, int, gr_comm, gr_stream)) \
	X(ncclSend, gr_result, (const void *, size_t, int, int, gr_comm, gr_stream)) \
	X(ncclRecv, gr_result, (void *, size_t, int, int, gr_comm, gr_stream)) \
	X(ncclGroupStart, gr_result, (void)) \
	X(ncclGroupEnd, gr_result, (void))

#define CUDA_SYMBOLS(X) \
	X(cudaSetDevice, gr_result, (int)) \
	X(cudaStreamCreateWithFlags, gr_result, (gr_stream *, unsigned int)) \
	X(cudaEventCreateWithFlags, gr_result, (gr_event *, unsigned int)) \
	X(cudaEventRecord, gr_result, (gr_event, gr_stream)) \
	X(cudaEventQuery, gr_result, (gr_event)) \
	X(cudaEventSynchronize, gr_result, (gr_event)) \
	X(cudaStreamWaitEvent, gr_result, (gr_stream, gr_event, unsigned int)) \
	X(cudaMalloc, gr_result, (void **, size_t)) \
	X(cudaFree, gr_result, (void *)) \
	X(cudaMemcpyAsync, gr_result, (void *, const void *, size_t, int, gr_stream)) \
	X(cudaStreamSynchronize, gr_result, (gr_stream)) \
	X(cudaMemGetInfo, gr_result, (size_t *, size_t *)) \
	X(cudaGetErrorString, const char *, (gr_result))

#define DECLARE(name, ret, args) ret(*p_##name) args;
struct gr_nccl { NCCL_SYMBOLS(DECLARE) };
struct gr_cuda { CUDA_SYMBOLS(DECLARE) };

#define LOOKUP(name, ret, args) \
	L->p_##name = (ret(*) args)dlsym(h, #name); \
	if (!L->p_##name) { snprintf(err, errlen, "symbol %s missing from %s", #name, path); free(L); dlclose(h); return NULL; }

gr_nccl *gr_nccl_open(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { snprintf(err, errlen, "%s", dlerror()); return NULL; }
	gr_nccl *L = calloc(1, sizeof *L);
	NCCL_SYMBOLS(LOOKUP)
	return L;
}

gr_cuda *gr_cuda_open(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { snprintf(err, errlen, "%s", dlerror()); return NULL; }
	gr_cuda *L = calloc(1, sizeof *L);
	CUDA_SYMBOLS(LOOKUP)
	return L;
}

gr_result gr_nccl_get_version(gr_nccl *L, int *v) { return L->p_ncclGetVersion(v); }
gr_result gr_nccl_get_unique_id(gr_nccl *L, gr_unique_id *id) { return L->p_ncclGetUniqueId(id); }
gr_result gr_nccl_comm_init_rank(gr_nccl *L, gr_comm *c, int n, gr_unique_id *id, int r) { return L->p_ncclCommInitRank(c, n, *id, r); }
gr_result gr_nccl_comm_destroy(gr_nccl *L, gr_comm c) { return L->p_ncclCommDestroy(c); }
gr_result gr_nccl_comm_abort(gr_nccl *L, gr_comm c) { return L->p_ncclCommAbort(c); }
gr_result gr_nccl_comm_get_async_error(gr_nccl *L, gr_comm c, gr_result *e) { return L->p_ncclCommGetAsyncError(c, e); }
const char * gr_nccl_error_string(gr_nccl *L, gr_result r) { return L->p_ncclGetErrorString(r); }
gr_result gr_nccl_all_reduce(gr_nccl *L, uintptr_t s, uintptr_t r, size_t n, int d, int op, gr_comm c, uintptr_t st) { return L->p_ncclAllReduce((const void *)s, (void *)r, n, d, op, c, (gr_stream)st); }
gr_result gr_nccl_all_gather(gr_nccl *L, uintptr_t s, uintptr_t r, size_t n, int d, gr_comm c, uintptr_t st) { return L->p_ncclAllGather((const void *)s, (void *)r, n, d, c, (gr_stream)st); }
gr_result gr_nccl_reduce_scatter(gr_nccl *L, uintptr_t s, uintptr_t r, size_t n, int d, int op, gr_comm c, uintptr_t st) { return L->p_ncclReduceScatter((const void *)s, (void *)r, n, d, op, c, (gr_stream)st); }
gr_result gr_nccl_broadcast(gr_nccl *L, uintptr_t s, uintptr_t r, size_t n, int d, int root, gr_comm c, uintptr_t st) { return L->p_ncclBroadcast((const void *)s, (void *)r, n, d, root, c, (gr_stream)st); }
gr_result gr_nccl_send(gr_nccl *L, uintptr_t s, size_t n, int d, int peer, gr_comm c, uintptr_t st) { return L->p_ncclSend((const void *)s, n, d, peer, c, (gr_stream)st); }
gr_result gr_nccl_recv(gr_nccl *L, uintptr_t r, size_t n, int d, int peer, gr_comm c, uintptr_t st) { return L->p_ncclRecv((void *)r, n, d, peer, c, (gr_stream)st); }
gr_result gr_nccl_group_start(gr_nccl *L) { return L->p_ncclGroupStart(); }
gr_result gr_nccl_group_end(gr_nccl *L) { return L->p_ncclGroupEnd(); }

gr_result gr_cuda_set_device(gr_cuda *L, int d) { return L->p_cudaSetDevice(d); }
gr_result gr_cuda_stream_create(gr_cuda *L, uintptr_t *s) { gr_stream x = 0; gr_result r = L->p_cudaStreamCreateWithFlags(&x, 0x01 /* non-blocking */); *s = (uintptr_t)x; return r; }
gr_result gr_cuda_event_create(gr_cuda *L, uintptr_t *e) { gr_event x = 0; gr_result r = L->p_cudaEventCreateWithFlags(&x, 0x02 /* no timing */); *e = (uintptr_t)x; return r; }
gr_result gr_cuda_event_record(gr_cuda *L, uintptr_t e, uintptr_t s) { return L->p_cudaEventRecord((gr_event)e, (gr_stream)s); }
gr_result gr_cuda_event_query(gr_cuda *L, uintptr_t e) { return L->p_cudaEventQuery((gr_event)e); }
gr_result gr_cuda_event_synchronize(gr_cuda *L, uintptr_t e) { return L->p_cudaEventSynchronize((gr_event)e); }
gr_result gr_cuda_stream_wait_event(gr_cuda *L, uintptr_t s, uintptr_t e) { return L->p_cudaStreamWaitEvent((gr_stream)s, (gr_event)e, 0); }
gr_result gr_cuda_malloc(gr_cuda *L, uintptr_t *p, size_t n) { void *x = 0; gr_result r = L->p_cudaMalloc(&x, n); *p = (uintptr_t)x; return r; }
gr_result gr_cuda_free(gr_cuda *L, uintptr_t p) { return L->p_cudaFree((void *)p); }
gr_result gr_cuda_memcpy(gr_cuda *L, uintptr_t d, uintptr_t s, size_t n, int k, uintptr_t st) { return L->p_cudaMemcpyAsync((void *)d, (const void *)s, n, k, (gr_stream)st); }
gr_result gr_cuda_stream_synchronize(gr_cuda *L, uintptr_t s) { return L->p_cudaStreamSynchronize((gr_stream)s); }
gr_result gr_cuda_mem_get_info(gr_cuda *L, size_t *f, size_t *t) { return L->p_cudaMemGetInfo(f, t); }
const char *gr_cuda_error_string(gr_cuda *L, gr_result r) { return L->p_cudaGetErrorString(r); }
