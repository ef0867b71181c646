/* A test double of the CUDA runtime subset gorun uses: "device" memory is
   host memory, streams and events are tokens and every operation is done
   when it returns. The current device is kept per thread, as CUDA does. */
#include <stdlib.h>
#include <string.h>

static __thread int current = -1;

int cudaSetDevice(int d) { if (d < 0 || d > 7) return 101; /* invalid device */ current = d; return 0; }
int cudaStreamCreateWithFlags(void **s, unsigned f) { (void)f; if (current < 0) return 101; *s = malloc(1); return 0; }
int cudaEventCreateWithFlags(void **e, unsigned f) { (void)f; *e = malloc(1); return 0; }
int cudaEventRecord(void *e, void *s) { (void)e; (void)s; return 0; }
int cudaEventQuery(void *e) { (void)e; return 0; }
int cudaEventSynchronize(void *e) { (void)e; return 0; }
int cudaStreamWaitEvent(void *s, void *e, unsigned f) { (void)s; (void)e; (void)f; return 0; }
int cudaMalloc(void **p, size_t n) { if (n > ((size_t)1 << 32)) return 2; /* out of memory */ *p = malloc(n); return 0; }
int cudaFree(void *p) { free(p); return 0; }
int cudaMemcpyAsync(void *d, const void *s, size_t n, int k, void *st) { (void)k; (void)st; memcpy(d, s, n); return 0; }
int cudaStreamSynchronize(void *s) { (void)s; return 0; }
int cudaMemGetInfo(size_t *f, size_t *t) { *f = (size_t)1 << 32; *t = (size_t)1 << 32; return 0; }
const char *cudaGetErrorString(int r) { return r == 2 ? "out of memory (CUDA runtime test double)" : "error in the CUDA runtime test double"; }
