//go:build cgo

package nccl

import (
	"context"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// NewEnv creates the worker's world process group over NCCL from the
// environment gorun gives it (RANK, WORLD_SIZE, MASTER_ADDR/PORT), on
// GPU LOCAL_RANK, with NCCL and the CUDA runtime found as Open and
// OpenCUDA find them.
func NewEnv(ctx context.Context, opt comm.Options) (*comm.Env, error) {
	return comm.NewVendorEnv(ctx, "nccl", open, opt)
}

func open(l comm.Launch) (comm.DeviceRuntime, func(context.Context, comm.Store, *memory.RuntimeDevice, comm.Options) (*comm.Group, error), error) {
	n, err := Open()
	if err != nil {
		return nil, nil, err
	}
	cu, err := OpenCUDA()
	return cu, func(ctx context.Context, st comm.Store, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
		return NewGroup(ctx, st, l.Rank, l.Size, n, dev, opt)
	}, err
}
