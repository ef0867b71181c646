package comm

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/memory"
)

// Launch is what gorun (or torchrun) tells a worker about its place in
// the job: RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and
// GORUN_JOB_SECRET.
type Launch struct {
	Rank, LocalRank, Size int
	// StoreAddr is MASTER_ADDR:MASTER_PORT, where rank 0 serves the
	// bootstrap store.
	StoreAddr string
	// Secret is GORUN_JOB_SECRET's (the zero Secret when unset: the
	// store and the mesh then accept any connection).
	Secret Secret
}

// LaunchFromEnv reads the worker's environment. A malformed
// GORUN_JOB_SECRET is an error that names the variable and the form it
// wants, never its value.
func LaunchFromEnv() (Launch, error) {
	get := func(name string) (int, error) {
		v, err := strconv.Atoi(os.Getenv(name))
		if err != nil {
			return 0, fmt.Errorf("comm: %s=%q: want an integer (is this process launched by gorun?)", name, os.Getenv(name))
		}
		return v, nil
	}
	rank, err1 := get(workerenv.Rank)
	size, err2 := get(workerenv.WorldSize)
	port, err3 := get(workerenv.MasterPort)
	local, err4 := 0, error(nil)
	if os.Getenv(workerenv.LocalRank) != "" {
		local, err4 = get(workerenv.LocalRank)
	}
	secret, err5 := SecretFromEnv()
	if err := errors.Join(err1, err2, err3, err4, err5); err != nil {
		return Launch{}, err
	}
	addr := os.Getenv(workerenv.MasterAddr)
	if addr == "" {
		return Launch{}, errors.New("comm: MASTER_ADDR is not set (is this process launched by gorun?)")
	}
	return Launch{Rank: rank, LocalRank: local, Size: size, StoreAddr: net.JoinHostPort(addr, strconv.Itoa(port)), Secret: secret}, nil
}

// Env is a worker's world process group made from its environment, with
// the device, allocator and reuse engine it runs on. Tensors live in the
// device's memory: Upload and Download move bytes between them and the
// host.
type Env struct {
	*Group
	Device    memory.Device
	Allocator *memory.Allocator
	Engine    *memory.Engine
	// Backend is cpu, nccl or hccl.
	Backend string
	copier  DeviceRuntime // nil: host memory (the simulated device)
	rdev    *memory.RuntimeDevice
	server  *StoreServer
	client  *StoreClient
	guard   *guard
	secret  Secret
}

// DeviceRuntime is a vendor runtime with host-device copies (kind 1:
// host to device, 2: device to host, as cudaMemcpyAsync and
// aclrtMemcpyAsync number them).
type DeviceRuntime interface {
	memory.Runtime
	Copy(dst, src uintptr, n, kind int, stream uintptr) error
}

// DefaultDeviceMemory is the simulated device's capacity unless
// GORUN_DEVICE_MEMORY (e.g. 8GiB) says otherwise.
const DefaultDeviceMemory = 16 << 30

// NewFromEnv creates the world's process group on the CPU backend: rank 0
// serves the bootstrap store at MASTER_ADDR:MASTER_PORT. The reuse mode
// is MULTI_STREAM_MEMORY_REUSE's.
func NewFromEnv(ctx context.Context, opt Options) (*Env, error) {
	l, err := LaunchFromEnv()
	if err != nil {
		return nil, err
	}
	capacity := int64(DefaultDeviceMemory)
	if s := os.Getenv("GORUN_DEVICE_MEMORY"); s != "" {
		b, err := memory.ParseBytes(s)
		if err != nil {
			return nil, fmt.Errorf("comm: GORUN_DEVICE_MEMORY: %w", err)
		}
		capacity = int64(b)
	}
	dev := memory.NewSimDevice(capacity)
	e, err := newEnv(ctx, l, dev, "cpu")
	if err != nil {
		dev.Close()
		return nil, err
	}
	host, _, _ := net.SplitHostPort(e.client.LocalAddr().String())
	if opt, err = e.options(opt); err != nil {
		e.Close()
		return nil, err
	}
	if e.Group, err = NewGroup(ctx, e.client, l.Rank, l.Size, host, opt); err != nil {
		e.Close()
		return nil, err
	}
	e.describeWorld(l)
	return e, nil
}

// NewDeviceEnv creates the world's process group over a vendor library
// on device LOCAL_RANK of rt; newGroup makes the group through the
// store (nccl.NewGroup, hccl.NewGroup).
func NewDeviceEnv(ctx context.Context, l Launch, backend string, rt DeviceRuntime, newGroup func(ctx context.Context, st Store, dev *memory.RuntimeDevice, opt Options) (*Group, error), opt Options) (*Env, error) {
	dev, err := memory.NewRuntimeDevice(rt, l.LocalRank)
	if err != nil {
		return nil, fmt.Errorf("comm: %s: device %d (LOCAL_RANK): %w", backend, l.LocalRank, err)
	}
	e, err := newEnv(ctx, l, dev, backend)
	if err != nil {
		return nil, err
	}
	e.copier, e.rdev = rt, dev
	if opt, err = e.options(opt); err != nil {
		e.Close()
		return nil, err
	}
	if e.Group, err = newGroup(ctx, e.client, dev, opt); err != nil {
		e.Close()
		return nil, err
	}
	e.describeWorld(l)
	return e, nil
}

// OpenVendor opens a vendor's library and runtime for the world of l: the
// runtime, and the function that makes the group through the store.
type OpenVendor func(l Launch) (DeviceRuntime, func(ctx context.Context, st Store, dev *memory.RuntimeDevice, opt Options) (*Group, error), error)

// NewVendorEnv is NewDeviceEnv for the worker's environment
// (LaunchFromEnv), with the library opened by open.
func NewVendorEnv(ctx context.Context, backend string, open OpenVendor, opt Options) (*Env, error) {
	l, err := LaunchFromEnv()
	if err != nil {
		return nil, err
	}
	rt, newGroup, err := open(l)
	if err != nil {
		return nil, err
	}
	return NewDeviceEnv(ctx, l, backend, rt, newGroup, opt)
}

// options completes opt with the Env's device, allocator, engine and
// watchdog, and the timeout of TimeoutEnv unless opt has one.
func (e *Env) options(opt Options) (Options, error) {
	opt.Device, opt.Allocator, opt.Engine, opt.Watchdog = e.Device, e.Allocator, e.Engine, e.guard.dog
	if !opt.Secret.IsSet() {
		opt.Secret = e.secret
	}
	if opt.Timeout == 0 {
		d, err := timeoutFromEnv()
		if err != nil {
			return opt, err
		}
		opt.Timeout = d
	}
	return opt, nil
}

// describeWorld names the world group (pg 0) in the flight recorder.
func (e *Env) describeWorld(l Launch) {
	ranks := make([]int, l.Size)
	for i := range ranks {
		ranks[i] = i
	}
	e.guard.dog.Recorder().AddGroup(0, "0", "default_pg", ranks)
}

// newEnv makes the allocator and engine on dev and connects the store.
func newEnv(ctx context.Context, l Launch, dev memory.Device, backend string) (*Env, error) {
	mode, err := memory.ModeFromEnv()
	if err != nil {
		return nil, err
	}
	e := &Env{Device: dev, Backend: backend, secret: l.Secret}
	if !l.Secret.IsSet() {
		fmt.Fprint(os.Stderr, warnNoSecret)
	}
	_, sim := dev.(*memory.SimDevice)
	e.Allocator = memory.NewAllocator(dev, memory.AllocatorConfig{ExpandableSegments: sim && expandable()})
	e.Engine = memory.NewEngine(e.Allocator, mode)
	if l.Rank == 0 {
		ln, err := net.Listen("tcp", l.StoreAddr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) && os.Getenv(workerenv.UseAgentStore) == "True" {
				return nil, fmt.Errorf("comm: rank 0: serve the store on MASTER_ADDR:MASTER_PORT %s: %w: torchrun 2.x's agent holds that port for its own store (TORCHELASTIC_USE_AGENT_STORE=True); under torchrun, run with --rdzv-backend=c10d and TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, which give the workers a port of their own, or launch with gorun", l.StoreAddr, err)
			}
			return nil, fmt.Errorf("comm: rank 0: serve the store on MASTER_ADDR:MASTER_PORT %s: %w", l.StoreAddr, err)
		}
		e.server = ServeStore(ln, l.Secret)
	}
	if e.client, err = DialStore(ctx, l.StoreAddr, l.Secret); err != nil {
		if e.server != nil {
			e.server.Close()
		}
		return nil, err
	}
	if e.guard, err = startGuard(ctx, l, e.client); err != nil {
		e.client.Close()
		if e.server != nil {
			e.server.Close()
		}
		return nil, err
	}
	return e, nil
}

// expandable reads PYTORCH_CUDA_ALLOC_CONF's expandable_segments, which
// gorun sets by default.
func expandable() bool {
	for _, kv := range strings.Split(os.Getenv(workerenv.AllocConf), ",") {
		if kv == "expandable_segments:True" {
			return true
		}
	}
	return false
}

// Upload copies host into t (len(host) bytes from its start), on the
// caller's stream, and returns once done.
func (e *Env) Upload(t *memory.Tensor, host []byte) error {
	if int64(len(host)) > t.Size() {
		return fmt.Errorf("comm: upload of %d bytes into a tensor of %d", len(host), t.Size())
	}
	if e.copier == nil {
		copy(t.Bytes(), host)
		return nil
	}
	return e.deviceCopy(t.Region().Ptr, host, 1)
}

// Download copies the start of t into host, after the work ordered
// before it on the caller's stream.
func (e *Env) Download(host []byte, t *memory.Tensor) error {
	if int64(len(host)) > t.Size() {
		return fmt.Errorf("comm: download of %d bytes from a tensor of %d", len(host), t.Size())
	}
	if e.copier == nil {
		copy(host, t.Bytes())
		return nil
	}
	return e.deviceCopy(t.Region().Ptr, host, 2)
}

// deviceCopy copies between device address p and host on the compute
// stream and waits for it.
func (e *Env) deviceCopy(p uintptr, host []byte, kind int) error {
	if len(host) == 0 {
		return nil
	}
	hp := uintptr(unsafe.Pointer(&host[0]))
	dst, src := p, hp
	if kind == 2 {
		dst, src = hp, p
	}
	err := e.rdev.Do(func() error {
		s := e.rdev.Handle(e.Group.opt.Compute)
		if err := e.copier.Copy(dst, src, len(host), kind, s); err != nil {
			return err
		}
		return e.copier.SynchronizeStream(s)
	})
	runtime.KeepAlive(host)
	return err
}

// Stopping tells the Env's watchdog that the process is asked to stop
// (the agent ends the round with SIGTERM or SIGINT): a program that takes
// those signals itself (signal.NotifyContext) calls it when they come, so
// that a wait for the other ranks' flight-recorder dumps ends within
// watchdog.StopDumpGrace instead of watchdog.DefaultDumpWait. Safe to
// call more than once, and on an Env without a watchdog.
func (e *Env) Stopping() {
	if e.guard != nil {
		e.guard.handler.Stopping()
	}
}

// Close ends the group, the store and the device.
func (e *Env) Close() error {
	if e.Group != nil {
		e.Group.Close()
	}
	if e.guard != nil {
		e.guard.stop()
	}
	if e.client != nil {
		e.client.Close()
	}
	if e.server != nil {
		e.server.Close()
	}
	if c, ok := e.Device.(interface{ Close() }); ok {
		c.Close()
	}
	return nil
}
