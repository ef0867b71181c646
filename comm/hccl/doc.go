// Package hccl binds HCCL and the ACL runtime (Ascend NPUs) through cgo,
// with the libraries opened by dlopen at first use: nothing links against
// them and the build needs no CANN headers (shim.h declares the C ABI
// subset; a function table per opened library is filled by dlsym). A
// missing library or symbol is an error naming it and every place
// searched. Device is the ACL runtime as a memory.Device; the current
// device is per OS thread, so each call locks its thread and sets it.
// The tests drive the binding against test doubles built from
// testdata/*.c.
package hccl
