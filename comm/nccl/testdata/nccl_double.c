/* A test double of libnccl.so.2 with the ABI subset gorun uses: the ranks
   of a communicator are threads of one process and the "device" buffers
   are host memory; collectives run synchronously and ignore the stream.
   Built by the tests with gcc -shared; -DOMIT_GROUP_END leaves out
   ncclGroupEnd to test a missing symbol. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct { char internal[128]; } ncclUniqueId;
enum { MAXR = 16 };

struct group {
	char id[128];
	int n, joined, arrived, gen;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	const void *send[MAXR];
	const void *mail[MAXR][MAXR];
	struct group *next;
};
typedef struct { struct group *g; int rank; } comm_t;

static struct group *groups;
static pthread_mutex_t gmu = PTHREAD_MUTEX_INITIALIZER;
static int idseq;

int ncclGetVersion(int *v) { *v = 22105; return 0; }
const char *ncclGetErrorString(int r) { return r ? "error in the NCCL test double" : "no error"; }

int ncclGetUniqueId(ncclUniqueId *id) {
	memset(id, 0, sizeof *id);
	pthread_mutex_lock(&gmu);
	int seq = ++idseq;
	pthread_mutex_unlock(&gmu);
	int pid = getpid();
	memcpy(id->internal, &pid, sizeof pid);
	memcpy(id->internal + 8, &seq, sizeof seq);
	return 0;
}

static void barrier(struct group *g) {
	pthread_mutex_lock(&g->mu);
	int gen = g->gen;
	if (++g->arrived == g->n) { g->arrived = 0; g->gen++; pthread_cond_broadcast(&g->cv); }
	else while (gen == g->gen) pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
}

int ncclCommInitRank(comm_t **c, int n, ncclUniqueId id, int rank) {
	if (n < 1 || n > MAXR || rank < 0 || rank >= n) return 4; /* ncclInvalidArgument */
	pthread_mutex_lock(&gmu);
	struct group *g = groups;
	while (g && memcmp(g->id, id.internal, 128)) g = g->next;
	if (!g) {
		g = calloc(1, sizeof *g);
		memcpy(g->id, id.internal, 128);
		g->n = n;
		pthread_mutex_init(&g->mu, 0);
		pthread_cond_init(&g->cv, 0);
		g->next = groups;
		groups = g;
	}
	pthread_mutex_unlock(&gmu);
	*c = calloc(1, sizeof **c);
	(*c)->g = g;
	(*c)->rank = rank;
	barrier(g);
	return 0;
}

int ncclCommDestroy(comm_t *c) { free(c); return 0; }
int ncclCommAbort(comm_t *c) { free(c); return 0; }
int ncclCommGetAsyncError(comm_t *c, int *e) { (void)c; *e = 0; return 0; }
int ncclGroupStart(void) { return 0; }
#ifndef OMIT_GROUP_END
int ncclGroupEnd(void) { return 0; }
#endif

static size_t esize(int d) {
	switch (d) { case 0: case 1: return 1; case 2: case 3: return 4; case 4: case 5: return 8;
	case 6: case 9: return 2; case 7: return 4; case 8: return 8; }
	return 0;
}

#define REDUCE(T) do { \
	T *out = (T *)dst; \
	for (size_t i = 0; i < count; i++) { \
		T acc = ((const T *)srcs[0])[i + off]; \
		for (int r = 1; r < n; r++) { \
			T v = ((const T *)srcs[r])[i + off]; \
			switch (op) { case 1: acc *= v; break; case 2: acc = v > acc ? v : acc; break; \
			case 3: acc = v < acc ? v : acc; break; default: acc += v; } \
		} \
		if (op == 4) acc /= n; \
		out[i] = acc; \
	} } while (0)

static int reduce(void *dst, const void **srcs, int n, size_t off, size_t count, int d, int op) {
	switch (d) {
	case 1: REDUCE(uint8_t); return 0;
	case 2: REDUCE(int32_t); return 0;
	case 4: REDUCE(int64_t); return 0;
	case 7: REDUCE(float); return 0;
	case 8: REDUCE(double); return 0;
	}
	return 5; /* ncclInvalidUsage: the double reduces fewer types */
}

int ncclAllReduce(const void *s, void *r, size_t count, int d, int op, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	void *tmp = malloc(count * esize(d) + 1);
	g->send[c->rank] = s;
	barrier(g);
	int rc = reduce(tmp, g->send, g->n, 0, count, d, op);
	barrier(g);
	memcpy(r, tmp, count * esize(d));
	free(tmp);
	return rc;
}

int ncclReduceScatter(const void *s, void *r, size_t count, int d, int op, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	void *tmp = malloc(count * esize(d) + 1);
	g->send[c->rank] = s;
	barrier(g);
	int rc = reduce(tmp, g->send, g->n, c->rank * count, count, d, op);
	barrier(g);
	memcpy(r, tmp, count * esize(d));
	free(tmp);
	return rc;
}

int ncclAllGather(const void *s, void *r, size_t count, int d, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	size_t n = count * esize(d);
	char *tmp = malloc(n * g->n + 1);
	g->send[c->rank] = s;
	barrier(g);
	for (int q = 0; q < g->n; q++) memcpy(tmp + q * n, g->send[q], n);
	barrier(g);
	memcpy(r, tmp, n * g->n);
	free(tmp);
	return 0;
}

int ncclBroadcast(const void *s, void *r, size_t count, int d, int root, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	size_t n = count * esize(d);
	char *tmp = malloc(n + 1);
	g->send[c->rank] = s;
	barrier(g);
	memcpy(tmp, g->send[root], n);
	barrier(g);
	memcpy(r, tmp, n);
	free(tmp);
	return 0;
}

int ncclSend(const void *s, size_t count, int d, int peer, comm_t *c, void *stream) {
	(void)stream; (void)count; (void)d;
	struct group *g = c->g;
	pthread_mutex_lock(&g->mu);
	g->mail[peer][c->rank] = s;
	pthread_cond_broadcast(&g->cv);
	while (g->mail[peer][c->rank]) pthread_cond_wait(&g->cv, &g->mu);
	pthread_mutex_unlock(&g->mu);
	return 0;
}

int ncclRecv(void *r, size_t count, int d, int peer, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	pthread_mutex_lock(&g->mu);
	while (!g->mail[c->rank][peer]) pthread_cond_wait(&g->cv, &g->mu);
	memcpy(r, g->mail[c->rank][peer], count * esize(d));
	g->mail[c->rank][peer] = 0;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return 0;
}
