//go:build cgo

package hccl

import (
	"context"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/memory"
)

// NewEnv creates the worker's world process group over HCCL from the
// environment gorun gives it (RANK, WORLD_SIZE, MASTER_ADDR/PORT), on NPU
// LOCAL_RANK, with HCCL and the ACL runtime found as Open and OpenACL
// find them.
func NewEnv(ctx context.Context, opt comm.Options) (*comm.Env, error) {
	return comm.NewVendorEnv(ctx, "hccl", func(l comm.Launch) (comm.DeviceRuntime, func(context.Context, comm.Store, *memory.RuntimeDevice, comm.Options) (*comm.Group, error), error) {
		h, err := Open()
		if err != nil {
			return nil, nil, err
		}
		acl, err := OpenACL()
		return acl, func(ctx context.Context, st comm.Store, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
			return NewGroup(ctx, st, l.Rank, l.Size, h, dev, opt)
		}, err
	}, opt)
}
