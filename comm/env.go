package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/memory"
)

// Env is a worker's process group made from the environment gorun (or
// torchrun) gives it, with the simulated device, allocator and reuse
// engine it runs on.
type Env struct {
	*Group
	Device    *memory.SimDevice
	Allocator *memory.Allocator
	Engine    *memory.Engine
	server    *StoreServer
	client    *StoreClient
}

// DefaultDeviceMemory is the simulated device's capacity unless
// GORUN_DEVICE_MEMORY (e.g. 8GiB) says otherwise.
const DefaultDeviceMemory = 16 << 30

// NewFromEnv creates the world's process group: RANK, WORLD_SIZE,
// MASTER_ADDR and MASTER_PORT say who and where; rank 0 serves the
// bootstrap store there. The reuse mode is MULTI_STREAM_MEMORY_REUSE's.
func NewFromEnv(ctx context.Context, opt Options) (*Env, error) {
	get := func(name string) (int, error) {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			return 0, fmt.Errorf("comm: %s=%q: want an integer (is this process launched by gorun?)", name, os.Getenv(name))
		}
		return v, nil
	}
	rank, err1 := get("RANK")
	size, err2 := get("WORLD_SIZE")
	port, err3 := get("MASTER_PORT")
	addr := os.Getenv("MASTER_ADDR")
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, err
	}
	if addr == "" {
		return nil, errors.New("comm: MASTER_ADDR is not set (is this process launched by gorun?)")
	}
	capacity := int64(DefaultDeviceMemory)
	if s := os.Getenv("GORUN_DEVICE_MEMORY"); s != "" {
		b, err := memory.ParseBytes(s)
		if err != nil {
			return nil, fmt.Errorf("comm: GORUN_DEVICE_MEMORY: %w", err)
		}
		capacity = int64(b)
	}
	mode, err := memory.ModeFromEnv()
	if err != nil {
		return nil, err
	}
	e := &Env{Device: memory.NewSimDevice(capacity)}
	e.Allocator = memory.NewAllocator(e.Device, memory.AllocatorConfig{ExpandableSegments: expandable()})
	e.Engine = memory.NewEngine(e.Allocator, mode)
	storeAddr := net.JoinHostPort(addr, strconv.Itoa(port))
	if rank == 0 {
		ln, err := net.Listen("tcp", storeAddr)
		if err != nil {
			e.Close()
			return nil, fmt.Errorf("comm: rank 0: serve the store on MASTER_ADDR:MASTER_PORT %s: %w", storeAddr, err)
		}
		e.server = ServeStore(ln)
	}
	if e.client, err = DialStore(ctx, storeAddr); err != nil {
		e.Close()
		return nil, err
	}
	host, _, _ := net.SplitHostPort(e.client.LocalAddr().String())
	opt.Device, opt.Allocator, opt.Engine = e.Device, e.Allocator, e.Engine
	if e.Group, err = NewGroup(ctx, e.client, rank, size, host, opt); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

// expandable reads PYTORCH_CUDA_ALLOC_CONF's expandable_segments, which
// gorun sets by default.
func expandable() bool {
	for _, kv := range strings.Split(os.Getenv("PYTORCH_CUDA_ALLOC_CONF"), ",") {
		if kv == "expandable_segments:True" {
			return true
		}
	}
	return false
}

// Close ends the group, the store and the device.
func (e *Env) Close() error {
	if e.Group != nil {
		e.Group.Close()
	}
	if e.client != nil {
		e.client.Close()
	}
	if e.server != nil {
		e.server.Close()
	}
	e.Device.Close()
	return nil
}
