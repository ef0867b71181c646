// Package nccl binds NCCL and the CUDA runtime through cgo, with the
// libraries opened by dlopen at first use: nothing links against them,
// and the build needs no CUDA headers (shim.h declares the C ABI subset
// gorun uses; shim.c fills a table of function pointers with dlsym, one
// table per opened library). A missing library or symbol is an error that
// names it and every place searched. Device is the CUDA runtime as a
// memory.Device; the current device is per OS thread, so each call locks
// its thread and sets the device first.
//
// The tests drive the same path against test doubles built from
// testdata/*.c; `make test-gpu` runs them against the real libraries.
package nccl
