package bench

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestMeasureOverheadRunsEveryCase: with true(1) standing in for gorun
// (it accepts any arguments), every case is run, warm-ups left out.
func TestMeasureOverheadRunsEveryCase(t *testing.T) {
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1)")
	}
	o, err := measureOverhead(context.Background(), truePath, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]Stats{"gorun": o.Gorun, "shell": o.Shell, "direct": o.Direct, "version": o.Version} {
		if st.N != 3 || st.Min <= 0 || st.Min > st.Median || st.Median > st.Max {
			t.Errorf("%s: %+v, want 3 ordered positive runs", name, st)
		}
	}
	if _, err := measureOverhead(context.Background(), "/nonexistent/gorun", 1, 0); err == nil {
		t.Error("a missing gorun measured without error")
	}
}

func TestOverheadVerdict(t *testing.T) {
	ms := time.Millisecond
	st := func(median time.Duration) Stats { return Stats{N: 5, Median: median, Min: median, Max: median} }
	for _, c := range []struct {
		gorun, shell time.Duration
		met          bool
		verdict      string
	}{
		{6 * ms, 1500 * time.Microsecond, true, "Launch overhead over the shell: 4.50 ms (median gap), target 5.00 ms: met."},
		{7 * ms, 1 * ms, false, "Launch overhead over the shell: 6.00 ms (median gap), target 5.00 ms: NOT met."},
	} {
		o := Overhead{Gorun: st(c.gorun), Shell: st(c.shell), Direct: st(ms), Version: st(2 * ms)}
		if o.Met() != c.met {
			t.Errorf("gap %v: Met() = %v", o.Gap(), o.Met())
		}
		md := o.Markdown()
		if !strings.Contains(md, c.verdict) || !strings.Contains(md, "| `gorun --nproc-per-node=2 --no-python /bin/true` | "+st(c.gorun).String()+" |") {
			t.Errorf("markdown lacks %q or gorun's row:\n%s", c.verdict, md)
		}
	}
	if (Overhead{}).Met() {
		t.Error("no measurement meets the target")
	}
}
