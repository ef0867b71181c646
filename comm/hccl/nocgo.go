//go:build !cgo

package hccl

import (
	"context"
	"errors"

	"github.com/gorun-dev/gorun/comm"
)

// ErrNoCgo: this build has no cgo, so it cannot open HCCL.
var ErrNoCgo = errors.New("hccl: gorun was built without cgo (CGO_ENABLED=0): the HCCL backend is unavailable")

// HCCL stands for the library in a build without cgo.
type HCCL struct{}

// Open fails: no cgo.
func Open() (*HCCL, error) { return nil, ErrNoCgo }

// OpenPath fails: no cgo.
func OpenPath(string) (*HCCL, error) { return nil, ErrNoCgo }

// NewEnv fails: no cgo.
func NewEnv(context.Context, comm.Options) (*comm.Env, error) { return nil, ErrNoCgo }
