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
	int n, joined, arrived, gen, aborted;
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

/* ncclRemoteError: what every waiting rank gets once a rank aborted. */
enum { ABORTED = 6 };

static int barrier(struct group *g) {
	pthread_mutex_lock(&g->mu);
	int gen = g->gen;
	if (++g->arrived == g->n) { g->arrived = 0; g->gen++; pthread_cond_broadcast(&g->cv); }
	else while (gen == g->gen && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
	int rc = gen == g->gen ? ABORTED : 0;
	pthread_mutex_unlock(&g->mu);
	return rc;
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
	return barrier(g);
}

int ncclCommDestroy(comm_t *c) { free(c); return 0; }
int ncclCommAbort(comm_t *c) {
	pthread_mutex_lock(&c->g->mu);
	c->g->aborted = 1;
	pthread_cond_broadcast(&c->g->cv);
	pthread_mutex_unlock(&c->g->mu);
	free(c);
	return 0;
}
/* NCCL_DOUBLE_ASYNC_ERROR=<code> makes every communicator report that
   asynchronous error (for the watchdog's tests). */
int ncclCommGetAsyncError(comm_t *c, int *e) {
	(void)c;
	const char *v = getenv("NCCL_DOUBLE_ASYNC_ERROR");
	*e = v ? atoi(v) : 0;
	return 0;
}

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
	if (barrier(g)) { free(tmp); return ABORTED; }
	int rc = reduce(tmp, g->send, g->n, 0, count, d, op);
	if (barrier(g)) { free(tmp); return ABORTED; }
	memcpy(r, tmp, count * esize(d));
	free(tmp);
	return rc;
}

int ncclReduceScatter(const void *s, void *r, size_t count, int d, int op, comm_t *c, void *stream) {
	(void)stream;
	struct group *g = c->g;
	void *tmp = malloc(count * esize(d) + 1);
	g->send[c->rank] = s;
	if (barrier(g)) { free(tmp); return ABORTED; }
	int rc = reduce(tmp, g->send, g->n, c->rank * count, count, d, op);
	if (barrier(g)) { free(tmp); return ABORTED; }
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
	if (barrier(g)) { free(tmp); return ABORTED; }
	for (int q = 0; q < g->n; q++) memcpy(tmp + q * n, g->send[q], n);
	if (barrier(g)) { free(tmp); return ABORTED; }
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
	if (barrier(g)) { free(tmp); return ABORTED; }
	memcpy(tmp, g->send[root], n);
	if (barrier(g)) { free(tmp); return ABORTED; }
	memcpy(r, tmp, n);
	free(tmp);
	return 0;
}

/* Point-to-point: a send posts its buffer in the receiver's mailbox and
   waits until the receiver took it. Between ncclGroupStart and
   ncclGroupEnd, sends and receives of this thread are queued; the end
   posts every send, then runs every receive, then waits for the sends. */
static int post(struct group *g, int from, int to, const void *s) {
	pthread_mutex_lock(&g->mu);
	while (g->mail[to][from] && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
	int rc = g->aborted ? ABORTED : 0;
	if (!rc) g->mail[to][from] = s;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return rc;
}

static int taken(struct group *g, int from, int to, const void *s) {
	pthread_mutex_lock(&g->mu);
	while (g->mail[to][from] == s && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
	int rc = g->mail[to][from] == s ? ABORTED : 0;
	pthread_mutex_unlock(&g->mu);
	return rc;
}

static int take(struct group *g, int from, int to, void *r, size_t n) {
	pthread_mutex_lock(&g->mu);
	while (!g->mail[to][from] && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
	int rc = g->mail[to][from] ? 0 : ABORTED;
	if (!rc) memcpy(r, g->mail[to][from], n);
	g->mail[to][from] = 0;
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->mu);
	return rc;
}

enum { MAXQ = 2 * MAXR * 4 };
struct p2p { int send; comm_t *c; int peer; void *buf; size_t n; };
static __thread int depth, queued;
static __thread struct p2p queue[MAXQ];

static int enqueue(int send, comm_t *c, int peer, void *buf, size_t n) {
	if (queued == MAXQ) return 5;
	queue[queued++] = (struct p2p){send, c, peer, buf, n};
	return 0;
}

int ncclSend(const void *s, size_t count, int d, int peer, comm_t *c, void *stream) {
	(void)stream;
	if (depth) return enqueue(1, c, peer, (void *)s, count * esize(d));
	return post(c->g, c->rank, peer, s) || taken(c->g, c->rank, peer, s) ? ABORTED : 0;
}

int ncclRecv(void *r, size_t count, int d, int peer, comm_t *c, void *stream) {
	(void)stream;
	if (depth) return enqueue(0, c, peer, r, count * esize(d));
	return take(c->g, peer, c->rank, r, count * esize(d));
}

int ncclGroupStart(void) { depth++; return 0; }
#ifndef OMIT_GROUP_END
int ncclGroupEnd(void) {
	if (depth == 0) return 5;
	if (--depth) return 0;
	int rc = 0;
	for (int i = 0; i < queued && !rc; i++) if (queue[i].send) rc = post(queue[i].c->g, queue[i].c->rank, queue[i].peer, queue[i].buf);
	for (int i = 0; i < queued && !rc; i++) if (!queue[i].send) rc = take(queue[i].c->g, queue[i].peer, queue[i].c->rank, queue[i].buf, queue[i].n);
	for (int i = 0; i < queued && !rc; i++) if (queue[i].send) rc = taken(queue[i].c->g, queue[i].c->rank, queue[i].peer, queue[i].buf);
	queued = 0;
	return rc;
}
#endif
