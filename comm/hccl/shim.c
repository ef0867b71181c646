/* Function tables filled by dlsym, and the calls through them. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include "shim.h"

typedef void *ptr;
#define HCCL_SYMBOLS(X) \
	X(HcclGetRootInfo, gh_result, (gh_root_info *)) \
	X(HcclCommInitRootInfo, gh_result, (uint32_t, const gh_root_info *, uint32_t, ptr *)) \
	X(HcclCommDestroy, gh_result, (ptr)) \
	X(HcclGetCommAsyncError, gh_result, (ptr, gh_result *)) \
	X(HcclGetErrorString, const char *, (gh_result)) \
	X(HcclAllReduce, gh_result, (ptr, ptr, uint64_t, int, int, ptr, ptr)) \
	X(HcclAllGather, gh_result, (ptr, ptr, uint64_t, int, ptr, ptr)) \
	X(HcclReduceScatter, gh_result, (ptr, ptr, uint64_t, int, int, ptr, ptr)) \
	X(HcclBroadcast, gh_result, (ptr, uint64_t, int, uint32_t, ptr, ptr)) \
	X(HcclSend, gh_result, (ptr, uint64_t, int, uint32_t, ptr, ptr)) \
	X(HcclRecv, gh_result, (ptr, uint64_t, int, uint32_t, ptr, ptr)) \
	X(HcclBarrier, gh_result, (ptr, ptr)) \
	X(HcclAlltoAll, gh_result, (const void *, uint64_t, int, const void *, uint64_t, int, ptr, ptr))

#define ACL_SYMBOLS(X) \
	X(aclrtSetDevice, gh_result, (int32_t)) \
	X(aclrtCreateStream, gh_result, (ptr *)) \
	X(aclrtCreateEvent, gh_result, (ptr *)) \
	X(aclrtRecordEvent, gh_result, (ptr, ptr)) \
	X(aclrtQueryEventStatus, gh_result, (ptr, int *)) \
	X(aclrtStreamWaitEvent, gh_result, (ptr, ptr)) \
	X(aclrtMalloc, gh_result, (ptr *, size_t, int)) \
	X(aclrtFree, gh_result, (ptr)) \
	X(aclrtMemcpyAsync, gh_result, (ptr, size_t, const void *, size_t, int, ptr)) \
	X(aclrtSynchronizeStream, gh_result, (ptr)) \
	X(aclrtGetMemInfo, gh_result, (int, size_t *, size_t *))

#define DECLARE(name, ret, args) ret(*p_##name) args;
struct gh_hccl { HCCL_SYMBOLS(DECLARE) };
struct gh_acl { ACL_SYMBOLS(DECLARE) };

#define LOOKUP(name, ret, args) \
	L->p_##name = (ret(*) args)dlsym(h, #name); \
	if (!L->p_##name) { snprintf(err, errlen, "symbol %s missing from %s", #name, path); free(L); dlclose(h); return NULL; }

gh_hccl *gh_hccl_open(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { snprintf(err, errlen, "%s", dlerror()); return NULL; }
	gh_hccl *L = calloc(1, sizeof *L);
	HCCL_SYMBOLS(LOOKUP)
	return L;
}

gh_acl *gh_acl_open(const char *path, char *err, int errlen) {
	void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h) { snprintf(err, errlen, "%s", dlerror()); return NULL; }
	gh_acl *L = calloc(1, sizeof *L);
	ACL_SYMBOLS(LOOKUP)
	return L;
}

#define P(x) ((ptr)(x))
gh_result gh_hccl_get_root_info(gh_hccl *L, gh_root_info *i) { return L->p_HcclGetRootInfo(i); }
gh_result gh_hccl_comm_init(gh_hccl *L, uint32_t n, gh_root_info *i, uint32_t r, uintptr_t *c) { ptr x = 0; gh_result e = L->p_HcclCommInitRootInfo(n, i, r, &x); *c = (uintptr_t)x; return e; }
gh_result gh_hccl_comm_destroy(gh_hccl *L, uintptr_t c) { return L->p_HcclCommDestroy(P(c)); }
gh_result gh_hccl_async_error(gh_hccl *L, uintptr_t c, gh_result *e) { return L->p_HcclGetCommAsyncError(P(c), e); }
const char *gh_hccl_error_string(gh_hccl *L, gh_result r) { return L->p_HcclGetErrorString(r); }
gh_result gh_hccl_all_reduce(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t n, int d, int op, uintptr_t c, uintptr_t st) { return L->p_HcclAllReduce(P(s), P(r), n, d, op, P(c), P(st)); }
gh_result gh_hccl_all_gather(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t n, int d, uintptr_t c, uintptr_t st) { return L->p_HcclAllGather(P(s), P(r), n, d, P(c), P(st)); }
gh_result gh_hccl_reduce_scatter(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t n, int d, int op, uintptr_t c, uintptr_t st) { return L->p_HcclReduceScatter(P(s), P(r), n, d, op, P(c), P(st)); }
gh_result gh_hccl_broadcast(gh_hccl *L, uintptr_t b, uint64_t n, int d, uint32_t root, uintptr_t c, uintptr_t st) { return L->p_HcclBroadcast(P(b), n, d, root, P(c), P(st)); }
gh_result gh_hccl_send(gh_hccl *L, uintptr_t s, uint64_t n, int d, uint32_t peer, uintptr_t c, uintptr_t st) { return L->p_HcclSend(P(s), n, d, peer, P(c), P(st)); }
gh_result gh_hccl_recv(gh_hccl *L, uintptr_t r, uint64_t n, int d, uint32_t peer, uintptr_t c, uintptr_t st) { return L->p_HcclRecv(P(r), n, d, peer, P(c), P(st)); }
gh_result gh_hccl_barrier(gh_hccl *L, uintptr_t c, uintptr_t st) { return L->p_HcclBarrier(P(c), P(st)); }
gh_result gh_hccl_all_to_all(gh_hccl *L, uintptr_t s, uint64_t n, int d, uintptr_t r, uintptr_t c, uintptr_t st) { return L->p_HcclAlltoAll(P(s), n, d, P(r), n, d, P(c), P(st)); }

gh_result gh_acl_set_device(gh_acl *L, int32_t d) { return L->p_aclrtSetDevice(d); }
gh_result gh_acl_stream_create(gh_acl *L, uintptr_t *s) { ptr x = 0; gh_result e = L->p_aclrtCreateStream(&x); *s = (uintptr_t)x; return e; }
gh_result gh_acl_event_create(gh_acl *L, uintptr_t *ev) { ptr x = 0; gh_result e = L->p_aclrtCreateEvent(&x); *ev = (uintptr_t)x; return e; }
gh_result gh_acl_event_record(gh_acl *L, uintptr_t e, uintptr_t s) { return L->p_aclrtRecordEvent(P(e), P(s)); }
/* ACL_EVENT_RECORDED_STATUS_COMPLETE is 1 (the newer call; the deprecated
   aclrtQueryEvent has the opposite numbering). */
gh_result gh_acl_event_status(gh_acl *L, uintptr_t e, int *complete) { int st = 0; gh_result r = L->p_aclrtQueryEventStatus(P(e), &st); *complete = st == 1; return r; }
gh_result gh_acl_stream_wait_event(gh_acl *L, uintptr_t s, uintptr_t e) { return L->p_aclrtStreamWaitEvent(P(s), P(e)); }
gh_result gh_acl_malloc(gh_acl *L, uintptr_t *p, size_t n) { ptr x = 0; gh_result e = L->p_aclrtMalloc(&x, n, 0 /* huge pages first */); *p = (uintptr_t)x; return e; }
gh_result gh_acl_free(gh_acl *L, uintptr_t p) { return L->p_aclrtFree(P(p)); }
gh_result gh_acl_memcpy(gh_acl *L, uintptr_t d, size_t max, uintptr_t s, size_t n, int k, uintptr_t st) { return L->p_aclrtMemcpyAsync(P(d), max, (const void *)s, n, k, P(st)); }
gh_result gh_acl_stream_synchronize(gh_acl *L, uintptr_t s) { return L->p_aclrtSynchronizeStream(P(s)); }
gh_result gh_acl_mem_info(gh_acl *L, size_t *f, size_t *t) { return L->p_aclrtGetMemInfo(1 /* ACL_HBM_MEM */, f, t); }
