// Package world opens a worker's world process group on the backend it
// names: cpu (comm's pure-Go backend on the simulated device), nccl or
// hccl (the vendor libraries through cgo and dlopen).
package world

import (
	"context"
	"fmt"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/comm/hccl"
	"github.com/gorun-dev/gorun/comm/nccl"
)

// Backends names the backends Open knows, for help texts.
const Backends = "cpu, nccl or hccl"

// Check reports whether backend is one Open knows.
func Check(backend string) error {
	switch backend {
	case "cpu", "nccl", "hccl":
		return nil
	}
	return fmt.Errorf("backend %q: want %s", backend, Backends)
}

// Open creates the world's process group from the worker's environment
// on backend.
func Open(ctx context.Context, backend string, opt comm.Options) (*comm.Env, error) {
	switch backend {
	case "cpu":
		return comm.NewFromEnv(ctx, opt)
	case "nccl":
		return nccl.NewEnv(ctx, opt)
	case "hccl":
		return hccl.NewEnv(ctx, opt)
	}
	return nil, Check(backend)
}
