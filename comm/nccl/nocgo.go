//go:build !cgo

package nccl

import (
	"context"
	"errors"

	"github.com/gorun-dev/gorun/comm"
)

// ErrNoCgo: this build has no cgo, so it cannot open NCCL.
var ErrNoCgo = errors.New("nccl: gorun was built without cgo (CGO_ENABLED=0): the NCCL backend is unavailable")

// NCCL stands for the library in a build without cgo.
type NCCL struct{}

// Open fails: no cgo.
func Open() (*NCCL, error) { return nil, ErrNoCgo }

// OpenPath fails: no cgo.
func OpenPath(string) (*NCCL, error) { return nil, ErrNoCgo }

// NewEnv fails: no cgo.
func NewEnv(context.Context, comm.Options) (*comm.Env, error) { return nil, ErrNoCgo }
