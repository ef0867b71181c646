//go:build cgo

package nccl

import (
	"runtime"
	"unsafe"
)

// hostAddr is the address of b's first byte, for a synchronous copy: the
// caller keeps b alive until the copy returned (runtime.KeepAlive).
func hostAddr(b []byte) uintptr {
	if len(b) == 0 {
		return 0
	}
	p := uintptr(unsafe.Pointer(&b[0]))
	runtime.KeepAlive(b)
	return p
}
