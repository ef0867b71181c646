/* The subset of the HCCL and ACL runtime C ABI that gorun uses (REUSE.md
   5.3, 5.4), declared here so that the build needs no CANN headers. Each
   library is opened with dlopen; its functions are called through a table
   that dlsym filled. Device addresses and handles pass as integers. */
#ifndef GORUN_HCCL_SHIM_H
#define GORUN_HCCL_SHIM_H
#include <stddef.h>
#include <stdint.h>

typedef int gh_result; /* HcclResult, aclError */
typedef struct { char internal[4108]; } gh_root_info; /* HcclRootInfo */
typedef struct gh_hccl gh_hccl;
typedef struct gh_acl gh_acl;

gh_hccl *gh_hccl_open(const char *path, char *err, int errlen);
gh_acl *gh_acl_open(const char *path, char *err, int errlen);

gh_result gh_hccl_get_root_info(gh_hccl *L, gh_root_info *info);
gh_result gh_hccl_comm_init(gh_hccl *L, uint32_t n, gh_root_info *info, uint32_t rank, uintptr_t *comm);
gh_result gh_hccl_comm_destroy(gh_hccl *L, uintptr_t comm);
gh_result gh_hccl_async_error(gh_hccl *L, uintptr_t comm, gh_result *err);
const char *gh_hccl_error_string(gh_hccl *L, gh_result r);
gh_result gh_hccl_all_reduce(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t count, int dtype, int op, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_all_gather(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t count, int dtype, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_reduce_scatter(gh_hccl *L, uintptr_t s, uintptr_t r, uint64_t count, int dtype, int op, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_broadcast(gh_hccl *L, uintptr_t buf, uint64_t count, int dtype, uint32_t root, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_send(gh_hccl *L, uintptr_t s, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_recv(gh_hccl *L, uintptr_t r, uint64_t count, int dtype, uint32_t peer, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_barrier(gh_hccl *L, uintptr_t comm, uintptr_t stream);
gh_result gh_hccl_all_to_all(gh_hccl *L, uintptr_t s, uint64_t count, int dtype, uintptr_t r, uintptr_t comm, uintptr_t stream);

gh_result gh_acl_set_device(gh_acl *L, int32_t device);
gh_result gh_acl_stream_create(gh_acl *L, uintptr_t *s);
gh_result gh_acl_event_create(gh_acl *L, uintptr_t *e);
gh_result gh_acl_event_record(gh_acl *L, uintptr_t e, uintptr_t s);
gh_result gh_acl_event_status(gh_acl *L, uintptr_t e, int *complete);
gh_result gh_acl_stream_wait_event(gh_acl *L, uintptr_t s, uintptr_t e);
gh_result gh_acl_malloc(gh_acl *L, uintptr_t *p, size_t n);
gh_result gh_acl_free(gh_acl *L, uintptr_t p);
gh_result gh_acl_memcpy(gh_acl *L, uintptr_t dst, size_t max, uintptr_t src, size_t n, int kind, uintptr_t s);
gh_result gh_acl_stream_synchronize(gh_acl *L, uintptr_t s);
gh_result gh_acl_mem_info(gh_acl *L, size_t *free, size_t *total);
#endif
