//go:build cgo

package hccl

import (
	"context"
	"fmt"
	"testing"

	"github.com/gorun-dev/gorun/comm"
	"github.com/gorun-dev/gorun/internal/testkit/commtest"
	"github.com/gorun-dev/gorun/memory"
)

// TestProcessGroupOnTheDoubles: every collective of comm's API over
// HCCL on the ACL double; an average, which HCCL lacks, is refused.
func TestProcessGroupOnTheDoubles(t *testing.T) {
	h, acl := openDoubles(t)
	newGroup := func(ctx context.Context, st comm.Store, rank, size int, dev *memory.RuntimeDevice, opt comm.Options) (*comm.Group, error) {
		return NewGroup(ctx, st, rank, size, h, dev, opt)
	}
	for _, size := range []int{1, 2, 3} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			commtest.RunAllOps(t, commtest.Vendor{Runtime: acl, Copier: acl, NewGroup: newGroup}, size)
		})
	}
	t.Run("avg", func(t *testing.T) {
		commtest.RunAllOps(t, commtest.Vendor{Runtime: acl, Copier: acl, NewGroup: newGroup, NoAvg: true}, 2)
	})
}
