package topology

import (
	"fmt"
	"strings"
)

// Dimension names, as in Megatron's order strings.
const (
	DimTP = "tp"
	DimCP = "cp"
	DimEP = "ep"
	DimDP = "dp"
	DimPP = "pp"
)

// DefaultOrder is Megatron's default rank order, fastest-varying first;
// OrderTPPPDP is the order of --use-tp-pp-dp-mapping.
const (
	DefaultOrder = "tp-cp-ep-dp-pp"
	OrderTPPPDP  = "tp-cp-ep-pp-dp"
)

// generator lays ranks out as a mixed-radix number over its dimensions:
// the first dimension of order varies fastest. It builds the groups of
// ranks that differ only in a chosen set of dimensions, in Megatron Core's
// order (RankGenerator).
type generator struct {
	dims  []string // in order, fastest first; every dimension present
	sizes []int    // size of each dim
	world int
}

// newGenerator builds a generator for the given sizes and order. Every
// dimension of size > 1 must appear in order; the others are appended.
func newGenerator(sizes map[string]int, order string) (*generator, error) {
	g := &generator{world: 1}
	seen := map[string]bool{}
	for _, d := range strings.Split(order, "-") {
		if _, known := sizes[d]; !known || seen[d] {
			return nil, fmt.Errorf("order %q: %q is not one of tp, cp, ep, dp, pp, or appears twice", order, d)
		}
		seen[d] = true
		g.dims = append(g.dims, d)
	}
	for _, d := range []string{DimTP, DimPP, DimDP, DimEP, DimCP} {
		if seen[d] {
			continue
		}
		if sizes[d] != 1 {
			return nil, fmt.Errorf("order %q leaves out %s, whose size is %d: name every dimension larger than 1", order, d, sizes[d])
		}
		g.dims = append(g.dims, d)
	}
	for _, d := range g.dims {
		g.sizes = append(g.sizes, sizes[d])
		g.world *= sizes[d]
	}
	return g, nil
}

// stride returns each dimension's stride: the product of the sizes of the
// dimensions before it.
func (g *generator) strides() []int {
	s := make([]int, len(g.sizes))
	p := 1
	for i, n := range g.sizes {
		s[i] = p
		p *= n
	}
	return s
}

// groups returns the groups of ranks that vary only in the dimensions of
// token ("tp-dp", order irrelevant): groups are listed with the other
// dimensions counted first-dimension-fastest, and inside a group the
// token's dimensions vary first-dimension-fastest, as Megatron Core's
// generate_masked_orthogonal_rank_groups does.
func (g *generator) groups(token string) [][]int {
	in := map[string]bool{}
	for _, d := range strings.Split(token, "-") {
		in[d] = true
	}
	strides := g.strides()
	var inShape, inStride, outShape, outStride []int
	for i, d := range g.dims {
		if in[d] {
			inShape, inStride = append(inShape, g.sizes[i]), append(inStride, strides[i])
		} else {
			outShape, outStride = append(outShape, g.sizes[i]), append(outStride, strides[i])
		}
	}
	size := product(inShape)
	n := g.world / size
	// The offsets of a group's members relative to its first rank do not
	// depend on the group: compute them once.
	member := make([]int, size)
	for r := range size {
		member[r] = compose(r, inShape, inStride)
	}
	out := make([][]int, n)
	flat := make([]int, n*size)
	for gi := range n {
		base := compose(gi, outShape, outStride)
		grp := flat[gi*size : (gi+1)*size : (gi+1)*size]
		for r, off := range member {
			grp[r] = base + off
		}
		out[gi] = grp
	}
	return out
}

// compose maps index, decomposed in shape (first dimension fastest), to
// the rank with the given strides.
func compose(index int, shape, stride []int) int {
	rank := 0
	for k, n := range shape {
		rank += (index % n) * stride[k]
		index /= n
	}
	return rank
}

func product(xs []int) int {
	p := 1
	for _, x := range xs {
		p *= x
	}
	return p
}

// coordinate returns rank's index along dim.
func (g *generator) coordinate(rank int, dim string) int {
	for i, d := range g.dims {
		if d == dim {
			return rank / g.strides()[i] % g.sizes[i]
		}
	}
	return 0
}
