/* A test double of the ACL runtime subset gorun uses: "device" memory is
   host memory, streams and events are tokens, every operation is done when
   it returns; the current device is per thread, as ACL keeps it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static __thread int current = -1;

int aclrtSetDevice(int32_t d) { if (d < 0 || d > 15) return 107001; current = d; return 0; }
int aclrtCreateStream(void **s) { if (current < 0) return 107002; *s = malloc(1); return 0; }
int aclrtCreateEvent(void **e) { *e = malloc(1); return 0; }
int aclrtRecordEvent(void *e, void *s) { (void)e; (void)s; return 0; }
int aclrtQueryEventStatus(void *e, int *status) { (void)e; *status = 1; /* complete */ return 0; }
int aclrtStreamWaitEvent(void *s, void *e) { (void)s; (void)e; return 0; }
int aclrtMalloc(void **p, size_t n, int policy) { (void)policy; if (n > ((size_t)1 << 32)) return 207001; *p = malloc(n); return 0; }
int aclrtFree(void *p) { free(p); return 0; }
int aclrtMemcpyAsync(void *d, size_t max, const void *s, size_t n, int k, void *st) { (void)k; (void)st; if (n > max) return 1; memcpy(d, s, n); return 0; }
int aclrtSynchronizeStream(void *s) { (void)s; return 0; }
int aclrtGetMemInfo(int attr, size_t *f, size_t *t) { (void)attr; *f = (size_t)1 << 32; *t = (size_t)1 << 32; return 0; }
