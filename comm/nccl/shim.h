/* The subset of the NCCL and CUDA runtime C ABI that gorun uses,
   declared here so that the build needs no CUDA headers (REUSE.md 5).
   The libraries are opened with dlopen at first use; every function is
   called through a pointer that dlsym filled. */
#ifndef GORUN_NCCL_SHIM_H
#define GORUN_NCCL_SHIM_H
#include <stddef.h>
#include <stdint.h>

typedef int gr_result;          /* ncclResult_t, cudaError_t */
typedef void *gr_comm;          /* ncclComm_t */
typedef void *gr_stream;        /* cudaStream_t */
typedef void *gr_event;         /* cudaEvent_t */
typedef struct { char internal[128]; } gr_unique_id; /* ncclUniqueId */

typedef struct gr_nccl gr_nccl; /* NCCL's function table */
typedef struct gr_cuda gr_cuda; /* the CUDA runtime's */

/* Loading: a table, or NULL with a message in err. */
gr_nccl *gr_nccl_open(const char *path, char *err, int errlen);
gr_cuda *gr_cuda_open(const char *path, char *err, int errlen);

/* NCCL */
gr_result gr_nccl_get_version(gr_nccl *L, int *v);
gr_result gr_nccl_get_unique_id(gr_nccl *L, gr_unique_id *id);
gr_result gr_nccl_comm_init_rank(gr_nccl *L, gr_comm *comm, int nranks, gr_unique_id *id, int rank);
gr_result gr_nccl_comm_destroy(gr_nccl *L, gr_comm comm);
gr_result gr_nccl_comm_abort(gr_nccl *L, gr_comm comm);
gr_result gr_nccl_comm_get_async_error(gr_nccl *L, gr_comm comm, gr_result *err);
const char * gr_nccl_error_string(gr_nccl *L, gr_result r);
gr_result gr_nccl_all_reduce(gr_nccl *L, uintptr_t s, uintptr_t r, size_t count, int dtype, int op, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_all_gather(gr_nccl *L, uintptr_t s, uintptr_t r, size_t sendcount, int dtype, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_reduce_scatter(gr_nccl *L, uintptr_t s, uintptr_t r, size_t recvcount, int dtype, int op, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_broadcast(gr_nccl *L, uintptr_t s, uintptr_t r, size_t count, int dtype, int root, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_send(gr_nccl *L, uintptr_t s, size_t count, int dtype, int peer, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_recv(gr_nccl *L, uintptr_t r, size_t count, int dtype, int peer, gr_comm comm, uintptr_t stream);
gr_result gr_nccl_group_start(gr_nccl *L);
gr_result gr_nccl_group_end(gr_nccl *L);

/* CUDA runtime: handles and device addresses pass as integers. */
gr_result gr_cuda_set_device(gr_cuda *L, int device);
gr_result gr_cuda_stream_create(gr_cuda *L, uintptr_t *s);
gr_result gr_cuda_event_create(gr_cuda *L, uintptr_t *e);
gr_result gr_cuda_event_record(gr_cuda *L, uintptr_t e, uintptr_t s);
gr_result gr_cuda_event_query(gr_cuda *L, uintptr_t e);
gr_result gr_cuda_event_synchronize(gr_cuda *L, uintptr_t e);
gr_result gr_cuda_stream_wait_event(gr_cuda *L, uintptr_t s, uintptr_t e);
gr_result gr_cuda_malloc(gr_cuda *L, uintptr_t *p, size_t n);
gr_result gr_cuda_free(gr_cuda *L, uintptr_t p);
gr_result gr_cuda_memcpy(gr_cuda *L, uintptr_t dst, uintptr_t src, size_t n, int kind, uintptr_t s);
gr_result gr_cuda_stream_synchronize(gr_cuda *L, uintptr_t s);
gr_result gr_cuda_mem_get_info(gr_cuda *L, size_t *free, size_t *total);
const char *gr_cuda_error_string(gr_cuda *L, gr_result r);
#endif
