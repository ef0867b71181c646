package topology

import (
	"fmt"
	"strconv"
)

// Pipeline says how a model's transformer layers split over pipeline
// stages, as Megatron Core places them.
type Pipeline struct {
	NumLayers int
	PP        int
	// VPP is the number of virtual stages (chunks) per pipeline rank; 0
	// means none.
	VPP int
	// FirstStageLayers and LastStageLayers, when above 0, fix the layers
	// of the first and last stages (uneven pipeline); the middle stages
	// share the rest.
	FirstStageLayers, LastStageLayers int
	// AccountForEmbedding and AccountForLoss count the embedding (loss)
	// as one layer of the first (last) stage: it then builds one layer
	// fewer.
	AccountForEmbedding, AccountForLoss bool
}

// Chunk is one virtual stage of a pipeline rank: NumLayers consecutive
// layers from Offset (0-based).
type Chunk struct {
	// VPStage is the virtual stage, or -1 without VPP.
	VPStage   int `json:"vp_stage"`
	Offset    int `json:"offset"`
	NumLayers int `json:"num_layers"`
}

// MarshalJSON writes vp_stage as null without virtual stages, as
// Megatron's placement functions take it.
func (c Chunk) MarshalJSON() ([]byte, error) {
	vp := "null"
	if c.VPStage >= 0 {
		vp = strconv.Itoa(c.VPStage)
	}
	return []byte(fmt.Sprintf(`{"vp_stage":%s,"offset":%d,"num_layers":%d}`, vp, c.Offset, c.NumLayers)), nil
}

// Stage is the layers of one pipeline rank.
type Stage struct {
	PPRank int     `json:"pp_rank"`
	Chunks []Chunk `json:"chunks"`
	// NumLayers is the sum over the chunks.
	NumLayers int `json:"num_layers"`
}

// Stages places the layers on every pipeline rank. It returns an error
// when the layers cannot be split as asked (Validate names the rule).
func (p Pipeline) Stages() ([]Stage, error) {
	if p.PP < 1 || p.NumLayers < 1 {
		return nil, fmt.Errorf("pipeline of %d stages for %d layers", p.PP, p.NumLayers)
	}
	vpp := max(p.VPP, 1)
	count, offset, err := p.splitter(vpp)
	if err != nil {
		return nil, err
	}
	stages := make([]Stage, p.PP)
	for r := range p.PP {
		stages[r].PPRank = r
		for vp := range vpp {
			c := Chunk{VPStage: vp, Offset: offset(r, vp), NumLayers: count(r, vp)}
			if p.VPP == 0 {
				c.VPStage = -1
			}
			stages[r].Chunks = append(stages[r].Chunks, c)
			stages[r].NumLayers += c.NumLayers
		}
	}
	return stages, nil
}

// splitter returns the layer count and offset of chunk (pp rank, vp).
func (p Pipeline) splitter(vpp int) (count, offset func(r, vp int) int, err error) {
	first, last := p.FirstStageLayers, p.LastStageLayers
	if first > 0 || last > 0 {
		return p.unevenSplitter(vpp)
	}
	total := p.NumLayers
	if p.AccountForEmbedding {
		total++
	}
	if p.AccountForLoss {
		total++
	}
	if total%p.PP != 0 || (total/p.PP)%vpp != 0 {
		return nil, nil, fmt.Errorf("%d layers do not split evenly over %d pipeline ranks of %d virtual stages", total, p.PP, vpp)
	}
	perChunk := total / p.PP / vpp
	firstChunk := func(r, vp int) bool { return r == 0 && vp == 0 }
	lastChunk := func(r, vp int) bool { return r == p.PP-1 && vp == vpp-1 }
	count = func(r, vp int) int {
		n := perChunk
		if p.AccountForEmbedding && firstChunk(r, vp) {
			n--
		}
		if p.AccountForLoss && lastChunk(r, vp) {
			n--
		}
		return n
	}
	offset = func(r, vp int) int {
		o := vp*(total/vpp) + r*perChunk
		if p.AccountForEmbedding && !firstChunk(r, vp) {
			o-- // the embedding took the first place
		}
		return o
	}
	return count, offset, nil
}

// unevenSplitter handles fixed first and/or last stage sizes.
func (p Pipeline) unevenSplitter(vpp int) (count, offset func(r, vp int) int, err error) {
	first, last := p.FirstStageLayers, p.LastStageLayers
	middleStages := p.PP
	if first > 0 {
		middleStages--
	}
	if last > 0 {
		middleStages--
	}
	middle := p.NumLayers - first - last
	switch {
	case middle < 0, middleStages < 0,
		middleStages == 0 && middle != 0, middleStages > 0 && middle%middleStages != 0,
		first%vpp != 0, last%vpp != 0, middleStages > 0 && (middle/middleStages)%vpp != 0:
		return nil, nil, fmt.Errorf("%d layers do not split as first %d, last %d over %d pipeline ranks of %d virtual stages", p.NumLayers, first, last, p.PP, vpp)
	}
	perMiddle := 0
	if middleStages > 0 {
		perMiddle = middle / middleStages
	}
	count = func(r, vp int) int {
		switch {
		case r == 0 && first > 0:
			return first / vpp
		case r == p.PP-1 && last > 0:
			return last / vpp
		}
		return perMiddle / vpp
	}
	f, m, l := first/vpp, middle/vpp, last/vpp
	offset = func(r, vp int) int {
		if r == 0 {
			return vp * (f + m + l)
		}
		mr := r
		if first > 0 {
			mr--
		}
		chunk := 0
		if middleStages > 0 {
			chunk = m / middleStages
		}
		return vp*(f+m+l) + f + mr*chunk
	}
	return count, offset, nil
}
