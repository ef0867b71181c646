/* A test double of libhccl.so with the ABI subset gorun uses, built on
   the NCCL double (ranks are threads of one process, buffers are host
   memory). -DOMIT_BARRIER leaves out HcclBarrier to test a missing
   symbol. */
#include "../../nccl/testdata/nccl_double.c"

typedef struct { char internal[4108]; } HcclRootInfo;

/* HCCL's types to the NCCL double's. */
static int nccl_type(int t) {
	switch (t) { case 2: return 2; case 3: return 6; case 4: return 7; case 5: return 4; case 7: return 1; case 10: return 8; case 11: return 9; }
	return -1;
}

int HcclGetRootInfo(HcclRootInfo *info) { memset(info, 0, sizeof *info); return ncclGetUniqueId((ncclUniqueId *)info); }
int HcclCommInitRootInfo(uint32_t n, const HcclRootInfo *info, uint32_t rank, comm_t **c) {
	ncclUniqueId id;
	memcpy(&id, info, sizeof id);
	return ncclCommInitRank(c, (int)n, id, (int)rank);
}
int HcclCommDestroy(comm_t *c) { return ncclCommAbort(c); } /* wakes the waiting ranks */
int HcclGetCommAsyncError(comm_t *c, int *e) { return ncclCommGetAsyncError(c, e); }
const char *HcclGetErrorString(int r) { return r ? "error in the HCCL test double" : "no error"; }
int HcclAllReduce(void *s, void *r, uint64_t n, int t, int op, comm_t *c, void *st) { return ncclAllReduce(s, r, n, nccl_type(t), op, c, st); }
int HcclAllGather(void *s, void *r, uint64_t n, int t, comm_t *c, void *st) { return ncclAllGather(s, r, n, nccl_type(t), c, st); }
int HcclReduceScatter(void *s, void *r, uint64_t n, int t, int op, comm_t *c, void *st) { return ncclReduceScatter(s, r, n, nccl_type(t), op, c, st); }
int HcclBroadcast(void *b, uint64_t n, int t, uint32_t root, comm_t *c, void *st) { return ncclBroadcast(b, b, n, nccl_type(t), (int)root, c, st); }
int HcclSend(void *s, uint64_t n, int t, uint32_t peer, comm_t *c, void *st) { return ncclSend(s, n, nccl_type(t), (int)peer, c, st); }
int HcclRecv(void *r, uint64_t n, int t, uint32_t peer, comm_t *c, void *st) { return ncclRecv(r, n, nccl_type(t), (int)peer, c, st); }
/* count elements of type t to and from every rank, as one group of
   sends and receives. */
int HcclAlltoAll(const void *s, uint64_t sc, int st, const void *r, uint64_t rc, int rt, comm_t *c, void *stream) {
	if (sc != rc || st != rt) return 1; /* HCCL_E_PARA */
	size_t n = sc * esize(nccl_type(st));
	ncclGroupStart();
	for (int p = 0; p < c->g->n; p++) {
		ncclSend((const char *)s + p * n, sc, nccl_type(st), p, c, stream);
		ncclRecv((char *)r + p * n, sc, nccl_type(st), p, c, stream);
	}
	return ncclGroupEnd();
}
#ifndef OMIT_BARRIER
int HcclBarrier(comm_t *c, void *st) { (void)st; return barrier(c->g); }
#endif
