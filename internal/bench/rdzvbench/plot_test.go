package rdzvbench

import (
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/golden"
)

// TestPlot: a run's results as a picture, compared with
// testdata/plot.svg (go test -update rewrites it): a point per count run,
// the ratio over each, the skipped count left out, the note escaped.
func TestPlot(t *testing.T) {
	results := []Result{
		{Agents: 64, Seconds: 0.115, FloorSeconds: 0.031},
		{Agents: 256, Seconds: 0.279, FloorSeconds: 0.163},
		{Agents: 1024, Seconds: 0.970, FloorSeconds: 0.616},
		{Agents: 2048, Seconds: 1.948, FloorSeconds: 1.145},
		{Agents: 4096, Skipped: "needs about 21504 open files"},
	}
	svg := string(Plot(results, "2 cores <test> & co"))
	for _, want := range []string{"1.70x", ">2048<", "&lt;test&gt; &amp; co", "</svg>"} {
		if !strings.Contains(svg, want) {
			t.Errorf("the picture lacks %q", want)
		}
	}
	if strings.Contains(svg, ">4096<") {
		t.Error("the skipped count is drawn")
	}
	golden.Check(t, "plot.svg", svg)
	if empty := string(Plot(nil, "")); !strings.Contains(empty, "no count was run") {
		t.Errorf("no results: %s", empty)
	}
}
