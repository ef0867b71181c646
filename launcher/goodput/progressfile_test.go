package goodput

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestProgressRead(t *testing.T) {
	dir := t.TempDir()
	for i, tt := range []struct {
		name, content string
		want          Progress
		err           string
	}{
		{name: "step", content: "step=120 time=2000000000 first_step=3 first_time=1000000000\n",
			want: Progress{Step: 120, FirstStep: 3, Time: time.Unix(2, 0), FirstTime: time.Unix(1, 0), Seen: true}},
		{name: "extra fields, any order, no newline", content: "first_time=5 loss=0.31 step=0 first_step=0 time=7 epoch=2",
			want: Progress{Time: time.Unix(0, 7), FirstTime: time.Unix(0, 5), Seen: true}},
		{name: "empty", content: ""},
		{name: "not key=value", content: "step 1\n", err: `"step" is not key=value`},
		{name: "not a number", content: "step=x time=2 first_step=0 first_time=1\n", err: `step="x"; want a non-negative integer`},
		{name: "negative", content: "step=-1 time=2 first_step=0 first_time=1\n", err: `step="-1"`},
		{name: "zero time", content: "step=1 time=0 first_step=0 first_time=0\n", err: `time="0"`},
		{name: "missing", content: "step=1 time=2 first_step=0\n", err: "no first_time field"},
		{name: "twice", content: "step=1 step=2 time=2 first_step=0 first_time=1\n", err: "step is given twice"},
		{name: "first after last", content: "step=1 time=2 first_step=0 first_time=3\n", err: "first_time=3 is after time=2"},
		{name: "too big", content: "step=1 time=2 first_step=0 first_time=1 pad=" + strings.Repeat("x", 4<<10) + "\n", err: "is over 4 KiB"},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
		if err := os.WriteFile(path, []byte(tt.content), 0o600); err != nil {
			t.Fatal(err)
		}
		got, err := ReadProgress(path)
		switch {
		case tt.err == "" && err != nil:
			t.Errorf("case %d (%s): %v", i, tt.name, err)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), path)):
			t.Errorf("case %d (%s): error %v, want one naming %s and containing %q", i, tt.name, err, path, tt.err)
		case tt.err == "" && (got.Seen != tt.want.Seen || got.Step != tt.want.Step || got.FirstStep != tt.want.FirstStep ||
			!got.Time.Equal(tt.want.Time) || !got.FirstTime.Equal(tt.want.FirstTime)):
			t.Errorf("case %d (%s): %+v, want %+v", i, tt.name, got, tt.want)
		}
	}
}

// TestProgressReadRefuses: a missing file is no progress; a link, a
// folder or a FIFO (which must not block the reader) is an error.
func TestProgressReadRefuses(t *testing.T) {
	dir := t.TempDir()
	if p, err := ReadProgress(filepath.Join(dir, "missing")); err != nil || p.Seen {
		t.Errorf("missing file: %+v, %v; want no progress and no error", p, err)
	}
	target := filepath.Join(dir, "target")
	if err := os.WriteFile(target, []byte("step=1 time=2 first_step=0 first_time=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	link, fifo := filepath.Join(dir, "link"), filepath.Join(dir, "fifo")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ path, want string }{
		{link, "symbolic link"},
		{dir, "want a regular file"},
		{fifo, "want a regular file"},
	} {
		if _, err := ReadProgress(tt.path); err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), tt.path) {
			t.Errorf("ReadProgress(%s): %v, want an error naming it and containing %q", tt.path, err, tt.want)
		}
	}
}

func TestProgressMerge(t *testing.T) {
	p := func(first, firstStep, last, step int64) Progress {
		return Progress{FirstTime: time.Unix(first, 0), FirstStep: int(firstStep), Time: time.Unix(last, 0), Step: int(step), Seen: true}
	}
	for i, tt := range []struct {
		name string
		in   []Progress
		want Progress
	}{
		{"none", nil, Progress{}},
		{"unseen only", []Progress{{}, {}}, Progress{}},
		{"one", []Progress{{}, p(1, 2, 3, 4)}, p(1, 2, 3, 4)},
		{"several", []Progress{p(5, 10, 50, 90), {}, p(3, 12, 60, 80), p(4, 9, 40, 95)}, p(3, 9, 60, 95)},
	} {
		got := MergeProgress(tt.in...)
		if got.Seen != tt.want.Seen || got.Step != tt.want.Step || got.FirstStep != tt.want.FirstStep ||
			!got.Time.Equal(tt.want.Time) || !got.FirstTime.Equal(tt.want.FirstTime) {
			t.Errorf("case %d (%s): %+v, want %+v", i, tt.name, got, tt.want)
		}
	}
}
