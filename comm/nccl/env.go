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
	l, err := comm.LaunchFromEnv()
	if err != nil {
		return nil, err
	}
	n, err := Open()
	if err != nil {
		return nil, err
	}
	cu, err := OpenCUDA()
	if err != nil {
		return nil, err
	}
	return comm.NewDeviceEnv(ctx, l, "nccl", cu, func(ctx context.Context, st comm.Store, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
		return NewGroup(ctx, st, l.Rank, l.Size, n, dev, opt)
	}, opt)
}
