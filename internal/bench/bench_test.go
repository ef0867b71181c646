package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStats(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		in               Sample
		median, min, max time.Duration
		n                int
	}{
		{Sample{3 * ms, 1 * ms, 2 * ms}, 2 * ms, 1 * ms, 3 * ms, 3},
		{Sample{4 * ms, 1 * ms, 2 * ms, 3 * ms}, 2500 * time.Microsecond, 1 * ms, 4 * ms, 4},
		{Sample{}, 0, 0, 0, 0},
	}
	for _, tt := range tests {
		st := tt.in.Stats()
		if st.Median != tt.median || st.Min != tt.min || st.Max != tt.max || st.N != tt.n {
			t.Errorf("Stats(%v) = %+v; want median %v min %v max %v n %d", tt.in, st, tt.median, tt.min, tt.max, tt.n)
		}
	}
	if got := (Stats{}).String(); got != "n/a" {
		t.Errorf("empty Stats = %q", got)
	}
	if r := Ratio(Stats{N: 1, Median: ms}, Stats{N: 1, Median: 4 * ms}); r != 0.25 {
		t.Errorf("Ratio = %v; want 0.25", r)
	}
	if r := Ratio(Stats{N: 1, Median: ms}, Stats{}); r != 0 {
		t.Errorf("Ratio against nothing = %v; want 0", r)
	}
}

func TestRestartGap(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good")
	os.WriteFile(good, []byte("fail 1 0 100.000000\nstart 0 1 100.050000\nstart 1 1 100.030000\n"), 0o644)
	if gap, err := restartGap(good); err != nil || gap < 29*time.Millisecond || gap > 31*time.Millisecond {
		t.Errorf("restartGap = %v, %v; want 30ms (rank 1's replacement)", gap, err)
	}
	bad := filepath.Join(dir, "bad")
	os.WriteFile(bad, []byte("fail 1 0 100.0\n"), 0o644)
	if _, err := restartGap(bad); err == nil {
		t.Error("restartGap without a restart: want an error")
	}
}

func TestUpdateSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "b.md")
	if err := UpdateSection(path, "x", "first"); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(path)
	os.WriteFile(path, append(data, "\nnotes kept\n"...), 0o644)
	if err := UpdateSection(path, "x", "second"); err != nil {
		t.Fatal(err)
	}
	if err := UpdateSection(path, "y", "other"); err != nil {
		t.Fatal(err)
	}
	data, _ = os.ReadFile(path)
	doc := string(data)
	if strings.Contains(doc, "first") || strings.Count(doc, "second") != 1 || !strings.Contains(doc, "notes kept") || !strings.Contains(doc, "other") {
		t.Errorf("document:\n%s", doc)
	}
	if strings.Index(doc, "second") > strings.Index(doc, "notes kept") {
		t.Errorf("section moved:\n%s", doc)
	}
}

func TestVerdict(t *testing.T) {
	r := LaunchResult{
		EmptyGorun: Stats{N: 1, Median: 20 * time.Millisecond}, EmptyTorchrun: Stats{N: 1, Median: time.Second},
		RestartGorun: Stats{N: 1, Median: 40 * time.Millisecond}, RestartGorunDone: Stats{N: 1, Median: 10 * time.Millisecond},
	}
	v := verdict(r)
	for _, want := range []string{"Empty job: 0.020x torchrun, target 0.03x: met", "rank 0 running): median 40.0 ms, target 30.0 ms: NOT met", "rank 0 done): median 10.0 ms, target 30.0 ms: met"} {
		if !strings.Contains(v, want) {
			t.Errorf("verdict lacks %q:\n%s", want, v)
		}
	}
}
