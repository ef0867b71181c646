package launcher

import (
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestOneConsoleKeepsTheWorkersOrder: where gorun's stdout and stderr are
// one file, a worker's lines reach it in the order the worker wrote them,
// whichever stream each went to (one pipe for both); where they are two,
// each gets its own stream's lines alone.
func TestOneConsoleKeepsTheWorkersOrder(t *testing.T) {
	t.Parallel()
	const script = `i=0
while [ $i -lt 300 ]; do echo "out $i"; echo "err $i" >&2; i=$((i+1)); done
echo "the last words" >&2
exit 1`
	t.Run("one file", func(t *testing.T) {
		t.Parallel()
		cfg, stdout, _ := shellConfig(t, 1, script)
		cfg.Stderr = cfg.Stdout
		res, err := runAgent(t, cfg, nil)
		if err != nil || res.ExitCode != 1 {
			t.Fatalf("Run = %+v, %v; want exit 1", res, err)
		}
		var lines []string
		for _, l := range strings.Split(stdout.String(), "\n") {
			if rest, ok := strings.CutPrefix(l, "[default0]:"); ok {
				lines = append(lines, rest)
			}
		}
		for i := range 300 {
			if 2*i+1 >= len(lines) || lines[2*i] != "out "+strconv.Itoa(i) || lines[2*i+1] != "err "+strconv.Itoa(i) {
				t.Fatalf("line %d: the worker's order is lost:\n%s", 2*i, strings.Join(lines, "\n"))
			}
		}
		if !strings.Contains(stdout.String(), "last line : the last words") {
			t.Errorf("the failure summary does not show the worker's last line:\n%s", stdout)
		}
	})
	t.Run("two files", func(t *testing.T) {
		t.Parallel()
		cfg, stdout, stderr := shellConfig(t, 1, script)
		if _, err := runAgent(t, cfg, nil); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(stdout.String(), "err ") || strings.Contains(stderr.String(), "out ") {
			t.Errorf("a stream's lines went to the other file:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	})
}

// TestSameOutput: one pipe's write end twice is one file; two pipes are
// two; the same writer is one.
func TestSameOutput(t *testing.T) {
	r1, w1, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r1.Close()
	defer w1.Close()
	r2, w2, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	defer w2.Close()
	dup, err := os.OpenFile("/proc/self/fd/"+strconv.Itoa(int(w1.Fd())), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer dup.Close()
	var b strings.Builder
	for _, c := range []struct {
		name string
		a, b io.Writer
		want bool
	}{
		{"one pipe", w1, dup, true},
		{"two pipes", w1, w2, false},
		{"one writer", &b, &b, true},
	} {
		if got := sameOutput(c.a, c.b); got != c.want {
			t.Errorf("%s: sameOutput = %v; want %v", c.name, got, c.want)
		}
	}
}
