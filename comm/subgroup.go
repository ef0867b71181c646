package comm

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"
)

// NewSubgroup makes the group of some of this group's ranks, as
// torch.distributed.new_group does: every member calls it with the same
// name and ranks (in the order that gives the new ranks); a rank not in
// ranks gets nil. The subgroup has its own communication stream on the
// same device.
//
// Options: WithTimeout gives the subgroup its own collective timeout
// (default: its parent's).
func (g *Group) NewSubgroup(ctx context.Context, name string, ranks []int, opts ...SubgroupOption) (*Group, error) {
	seen := map[int]bool{}
	for _, r := range ranks {
		if r < 0 || r >= g.size || seen[r] {
			return nil, fmt.Errorf("comm: subgroup %q: ranks %v: want distinct ranks below %d", name, ranks, g.size)
		}
		seen[r] = true
	}
	me := slices.Index(ranks, g.rank)
	if me < 0 {
		return nil, nil
	}
	opt := g.opt
	for _, o := range opts {
		o(&opt)
	}
	opt.Name = g.opt.Name + "/" + name
	// The same on every member without counting groups (only members
	// make a subgroup): a hash of the name.
	opt.PGID = pgIDOf(opt.Name)
	sub, err := NewGroup(ctx, g.store, me, len(ranks), g.host, opt)
	if err != nil {
		return nil, err
	}
	sub.ranks = slices.Clone(ranks)
	if opt.Watchdog != nil {
		global := make([]int, len(ranks))
		for i, r := range ranks {
			global[i] = g.ParentRank(r)
		}
		opt.Watchdog.Recorder().AddGroup(opt.PGID, opt.Name, name, global)
	}
	return sub, nil
}

// Subgroups makes one subgroup per list of ranks (such as the groups of a
// topology layout: every tensor-parallel group, say) and returns the one
// that holds this rank (nil if none). Every rank of g calls it with the
// same kind and lists.
func (g *Group) Subgroups(ctx context.Context, kind string, groups [][]int, opts ...SubgroupOption) (*Group, error) {
	var mine *Group
	for i, ranks := range groups {
		if !slices.Contains(ranks, g.rank) {
			continue
		}
		sub, err := g.NewSubgroup(ctx, kind+"/"+strconv.Itoa(i), ranks, opts...)
		if err != nil {
			return nil, err
		}
		mine = sub
	}
	return mine, nil
}

// SubgroupOption changes a subgroup's options.
type SubgroupOption func(*Options)

// WithTimeout bounds each collective of the subgroup (the watchdog's
// timeout for it).
func WithTimeout(d time.Duration) SubgroupOption {
	return func(o *Options) {
		if d > 0 {
			o.Timeout = d
		}
	}
}

// pgIDOf is a subgroup's flight-recorder id: a positive 31-bit hash of
// its name (the world is 0).
func pgIDOf(name string) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32()&0x7fffffff) | 1
}

// ParentRank is the rank in the parent group of this group's rank r.
func (g *Group) ParentRank(r int) int {
	if g.ranks == nil {
		return r
	}
	return g.ranks[r]
}
