package launcher

import (
	"testing"
	"time"

	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/watchdog"
)

// A node that runs only some of the job's ranks judges a hang only when
// one of its ranks left or is outside any collective; ranks that all wait
// in a collective wait for another node.
func TestLocalVerdict(t *testing.T) {
	waiting := probe.Snapshot{TimeNs: 1, Recorder: &probe.Recorder{Entries: []watchdog.Entry{{CollectiveSeqID: 4}}}}
	outside := probe.Snapshot{TimeNs: 1, Stack: []probe.Frame{{File: "train.py", Line: 3, Func: "main"}}}
	for _, tc := range []struct {
		name  string
		world string
		snaps []probe.Snapshot
		left  bool
		want  bool
	}{
		{"every rank here", "2", []probe.Snapshot{waiting, waiting}, false, true},
		{"others elsewhere, all waiting", "4", []probe.Snapshot{waiting, waiting}, false, false},
		{"others elsewhere, one outside", "4", []probe.Snapshot{waiting, outside}, false, true},
		{"others elsewhere, all outside: nobody here waits", "4", []probe.Snapshot{outside, outside}, false, false},
		{"others elsewhere, one left", "4", []probe.Snapshot{waiting, waiting}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			att := &attempt{cfg: &Config{}}
			h := &lifeWatch{att: att}
			for i, s := range tc.snaps {
				w := &worker{spec: WorkerSpec{LocalRank: i, Rank: i, Env: []string{"WORLD_SIZE=" + tc.world}}}
				if tc.left && i == 0 {
					w.leftAt = time.Now()
				}
				att.workers = append(att.workers, w)
				l := newLife(w.spec, newLifeSigns("", time.Now()), time.Now())
				l.probe.Observe(s)
				h.lives = append(h.lives, l)
			}
			if got := h.localVerdict(); got != tc.want {
				t.Errorf("localVerdict = %v; want %v", got, tc.want)
			}
		})
	}
}
