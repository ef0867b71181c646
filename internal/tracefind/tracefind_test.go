package tracefind

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/watchdog"
)

// writeDumps writes the dumps of world ranks into dir with the flight
// recorder, as comm's watchdog does: every rank completed one all-reduce
// and every rank but hung waits in the second, which hung never called.
// The files' modification time is at.
func writeDumps(t *testing.T, dir string, world, hung int, at time.Time) {
	t.Helper()
	ranks := make([]int, world)
	for r := range ranks {
		ranks[r] = r
	}
	for r := range world {
		rec := watchdog.NewRecorder(16)
		rec.AddGroup(0, "0", "world", ranks)
		id := rec.Record(watchdog.Entry{CollectiveSeqID: 0, ProfilingName: "gorun:all_reduce", InputSizes: [][]int64{{8}}, InputDtypes: []string{"float32"}}, at)
		rec.Started(id, at)
		rec.Completed(id, at)
		if r != hung {
			id := rec.Record(watchdog.Entry{CollectiveSeqID: 1, ProfilingName: "gorun:all_reduce", InputSizes: [][]int64{{8}}, InputDtypes: []string{"float32"}}, at)
			rec.Started(id, at)
		}
		path, err := watchdog.WriteDump(dir, rec.Dump(r, world, "test", at))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

// attemptDir is gorun's dump folder of a run's attempt under a log folder.
func attemptDir(logs, run string, n int) string {
	return filepath.Join(logs, run, "attempt_"+strconv.Itoa(n), "flight_recorder")
}

func TestFind(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	outside := t.TempDir()
	writeDumps(t, outside, 2, 1, t0)
	for _, c := range []struct {
		name string
		// tree builds the tree below root.
		tree func(t *testing.T, root string)
		// sub is the folder given to Find, below root.
		sub string
		// want are the attempts found, oldest first, as Name(); nil: none.
		want []string
		// errHas are words the error must hold when nothing is found.
		errHas []string
		// refused counts the links not followed.
		refused int
	}{
		{name: "the dump folder itself", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(root, "job", 0), 2, 1, t0)
		}, sub: "job/attempt_0/flight_recorder", want: []string{"run job attempt 0"}},
		{name: "the attempt folder", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(root, "job", 0), 2, 1, t0)
		}, sub: "job/attempt_0", want: []string{"run job attempt 0"}},
		{name: "the log folder, attempts by number", tree: func(t *testing.T, root string) {
			// attempt_1's files are older than attempt_0's: the number decides.
			writeDumps(t, attemptDir(root, "job", 1), 3, 2, t0)
			writeDumps(t, attemptDir(root, "job", 0), 3, 1, t0.Add(time.Minute))
		}, want: []string{"run job attempt 0", "run job attempt 1"}},
		{name: "runs by their newest dump, then by creation order of the names", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(root, "zeta", 0), 2, 1, t0)
			writeDumps(t, attemptDir(root, "alpha", 0), 2, 1, t0.Add(time.Hour))
			writeDumps(t, attemptDir(root, "job.10", 0), 2, 1, t0.Add(2*time.Hour))
			writeDumps(t, attemptDir(root, "job.9", 0), 2, 1, t0.Add(2*time.Hour))
			writeDumps(t, attemptDir(root, "job", 3), 2, 1, t0.Add(2*time.Hour))
		}, want: []string{"run zeta attempt 0", "run alpha attempt 0", "run job attempt 3", "run job.9 attempt 0", "run job.10 attempt 0"}},
		{name: "the folder above the log folder, 4 levels", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(filepath.Join(root, "logs"), "job", 0), 2, 1, t0)
		}, want: []string{"run job attempt 0"}},
		{name: "5 levels is too deep", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(filepath.Join(root, "a", "logs"), "job", 0), 2, 1, t0)
		}, errHas: []string{"no flight recorder dumps", "fr_trace_rank_<rank>.json", "up to 4 levels below", "attempt_<n>/flight_recorder"}},
		{name: "outside layout: named by folder", tree: func(t *testing.T, root string) {
			writeDumps(t, filepath.Join(root, "dumps"), 2, 1, t0)
		}, want: []string{"dumps in ROOT/dumps"}},
		{name: "a link leading outside is refused", tree: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "job", "attempt_0"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(root, "job", "attempt_0", "flight_recorder")); err != nil {
				t.Fatal(err)
			}
		}, errHas: []string{"no flight recorder dumps", "not followed, leading outside", "flight_recorder -> "}, refused: 1},
		{name: "a dump file linked from outside is refused", tree: func(t *testing.T, root string) {
			dir := attemptDir(root, "job", 0)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "fr_trace_rank_0.json"), filepath.Join(dir, "fr_trace_rank_0.json")); err != nil {
				t.Fatal(err)
			}
		}, errHas: []string{"not followed"}, refused: 1},
		{name: "a link inside is followed once, named by its target", tree: func(t *testing.T, root string) {
			writeDumps(t, attemptDir(root, "job", 1), 2, 1, t0)
			if err := os.Symlink(filepath.Join(root, "job", "attempt_1"), filepath.Join(root, "latest")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(root, filepath.Join(root, "job", "loop")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(root, "gone"), filepath.Join(root, "dangling")); err != nil {
				t.Fatal(err)
			}
		}, want: []string{"run job attempt 1"}},
		{name: "an empty log folder", tree: func(t *testing.T, root string) {
			if err := os.MkdirAll(filepath.Join(root, "job", "attempt_0", "0"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, errHas: []string{"no flight recorder dumps", "in ROOT nor"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := t.TempDir()
			c.tree(t, root)
			dir := filepath.Join(root, c.sub)
			res, err := Find(dir, Options{})
			if len(res.Refused) != c.refused {
				t.Errorf("refused %v, want %d", res.Refused, c.refused)
			}
			if c.want == nil {
				if !errors.Is(err, ErrNoDumps) {
					t.Fatalf("err %v, want ErrNoDumps", err)
				}
				for _, w := range c.errHas {
					if msg := strings.ReplaceAll(err.Error(), root, "ROOT"); !strings.Contains(msg, w) {
						t.Errorf("error %q lacks %q", msg, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range res.Attempts {
				got = append(got, strings.ReplaceAll(a.Name(), root, "ROOT"))
				if _, err := a.Read(); err != nil {
					t.Errorf("%s: %v", a.Name(), err)
				}
			}
			if strings.Join(got, "; ") != strings.Join(c.want, "; ") {
				t.Errorf("found %q, want %q", got, c.want)
			}
			if direct := c.sub != "" && strings.HasSuffix(c.sub, "flight_recorder"); res.Direct() != direct {
				t.Errorf("Direct() = %v, want %v", res.Direct(), direct)
			}
		})
	}
}

func TestFindRefusesWhatIsNotAFolder(t *testing.T) {
	root := t.TempDir()
	writeDumps(t, root, 1, -1, time.Unix(0, 0))
	for _, c := range []struct{ path, want string }{
		{filepath.Join(root, "fr_trace_rank_0.json"), "is not a folder"},
		{filepath.Join(root, "missing"), "no such file"},
	} {
		if _, err := Find(c.path, Options{}); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Find(%s): %v, want %q", c.path, err, c.want)
		}
	}
}

func TestIsDumpName(t *testing.T) {
	for name, want := range map[string]bool{
		"fr_trace_rank_0.json": true, "fr_trace_rank_12.json": true,
		"fr_trace_rank_0.json.tmp": false, "fr_trace_rank_-1.json": false, "fr_trace_rank_01.json": false,
		"fr_trace_rank_.json": false, "error.json": false,
	} {
		if got := isDumpName(name); got != want {
			t.Errorf("isDumpName(%q) = %v, want %v", name, got, want)
		}
	}
}
