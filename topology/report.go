package topology

import (
	"fmt"
	"io"
	"strings"
)

// WriteText prints a readable summary: layout, a sample of the groups,
// layers per stage, memory, issues and advice.
func (p *Plan) WriteText(w io.Writer) error {
	var b strings.Builder
	s := p.spec
	status := "valid"
	if !p.Valid {
		status = fmt.Sprintf("INVALID (%d errors)", len(p.Errors))
	}
	fmt.Fprintf(&b, "Layout: %s\n", status)
	fmt.Fprintf(&b, "  world %d = tp %d x pp %d x cp %d x dp %d", s.World, s.TP, s.PP, s.CP, p.Parallel.DP)
	if s.VPP > 0 {
		fmt.Fprintf(&b, ", vpp %d", s.VPP)
	}
	if s.EP > 1 || s.NumExperts > 0 {
		fmt.Fprintf(&b, "; experts: etp %d x ep %d x expt_dp %d", s.ETP, s.EP, p.Parallel.ExpertDP)
	}
	fmt.Fprintf(&b, "\n  order %s, %d nodes of %d ranks", s.Order, p.Parallel.Nodes, s.PerNode)
	if p.Parallel.MicroBatches > 0 {
		fmt.Fprintf(&b, ", %d micro-batches of %d per step", p.Parallel.MicroBatches, s.MicroBatch)
	}
	b.WriteString("\n")
	for _, i := range p.Errors {
		fmt.Fprintf(&b, "  error [%s]: %s\n", i.Rule, i.Message)
	}
	for _, i := range p.Warnings {
		fmt.Fprintf(&b, "  warning [%s]: %s\n", i.Rule, i.Message)
	}
	if !p.Valid {
		_, err := io.WriteString(w, b.String())
		return err
	}
	if r, err := NewRanks(s.Layout()); err == nil {
		b.WriteString("\nGroups (first of each kind):\n")
		for _, k := range GroupKinds() {
			g := r.Groups(k)
			fmt.Fprintf(&b, "  %-9s %d x %d ranks, e.g. %v\n", k, len(g), len(g[0]), sample(g[0]))
		}
	}
	b.WriteString("\nLayers per pipeline stage:\n")
	for _, st := range p.Stages {
		var chunks []string
		for _, c := range st.Chunks {
			if c.NumLayers == 0 {
				chunks = append(chunks, "-")
				continue
			}
			chunks = append(chunks, fmt.Sprintf("%d-%d", c.Offset, c.Offset+c.NumLayers-1))
		}
		fmt.Fprintf(&b, "  pp %d: %d layers (%s)\n", st.PPRank, st.NumLayers, strings.Join(chunks, ", "))
	}
	if m := p.Memory; m != nil {
		fmt.Fprintf(&b, "\nMemory of the most loaded GPU (%s estimator):\n", m.Estimator)
		for _, c := range m.Components {
			fmt.Fprintf(&b, "  %-42s %s (%.0f parameters x %.2f B)\n", c.Name, gib(c.Bytes), c.ParametersPerGPU, c.BytesPerParameter)
		}
		fmt.Fprintf(&b, "  %-42s %s (%s)\n", "activations", gib(m.ActivationBytes), m.ActivationFormula)
		fmt.Fprintf(&b, "  %-42s %s\n", "total", gib(m.TotalBytes))
		if m.Fits != nil {
			verdict := "fits"
			if !*m.Fits {
				verdict = "DOES NOT FIT"
			}
			fmt.Fprintf(&b, "  capacity %s: %s, headroom %s\n", gib(m.CapacityBytes), verdict, gib(m.HeadroomBytes))
		}
		fmt.Fprintf(&b, "  not counted: %s\n", strings.Join(m.NotCounted, "; "))
	}
	if len(p.Recommendations) > 0 {
		b.WriteString("\nAdvice, in order:\n")
		for _, r := range p.Recommendations {
			fmt.Fprintf(&b, "  %d. %s\n", r.Step, r.Action)
			if r.Estimated {
				fits := "fits"
				if r.Fits != nil && !*r.Fits {
					fits = "still over"
				}
				fmt.Fprintf(&b, "     estimate %s (saves %s, %s)\n", gib(r.TotalBytes), gib(r.SavesBytes), fits)
			}
			fmt.Fprintf(&b, "     cost: %s\n", r.Cost)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func gib(bytes float64) string { return fmt.Sprintf("%.2f GiB", bytes/(1<<30)) }
