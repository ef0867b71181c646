//go:build cgo

package nccl

/*
#include "shim.h"
*/
import "C"

// cSetDevice sets the current device of the calling thread.
func cSetDevice(cu *CUDA, index int) C.gr_result { return C.gr_cuda_set_device(cu.t, C.int(index)) }
