//go:build cgo

package nccl

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/internal/commtest"
	"github.com/gorun-dev/gorun/memory"
)

// TestProcessGroupOnTheDoubles: every collective of comm's API over
// NCCL, ranks as goroutines of one process, tensors from the caching
// allocator on the CUDA double.
func TestProcessGroupOnTheDoubles(t *testing.T) {
	n, cu := openDoubles(t)
	v := commtest.Vendor{Runtime: cu, Copier: cu, NewGroup: func(ctx context.Context, st comm.Store, rank, size int, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
		return NewGroup(ctx, st, rank, size, n, dev, opt)
	}}
	for _, size := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) { commtest.RunAllOps(t, v, size) })
	}
}
