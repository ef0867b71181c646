// Package probe is gorun's view into Python workers that know nothing of
// gorun. gorun writes sitecustomize.py (embedded here) into the run's
// folder and puts that folder first on the workers' PYTHONPATH; in each
// worker's own process it starts a thread that replaces a snapshot file
// every interval: the main thread's stack, the optimizer steps, and the
// newest entries of PyTorch's flight recorder. On request (a new id in
// the attempt's request file) it writes every thread's stack and the
// whole flight recorder, without stopping the worker. This package
// installs the module, names the variables that steer it, and reads what
// it writes, and judges what the snapshots say (verdict.go: a hang's
// cause, a straggler); package launcher acts on the verdicts.
package probe

import (
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/watchdog"
)

//go:embed sitecustomize.py
var module []byte

// RequestFile is the name of the attempt's request file, beside its
// local ranks' folders.
const RequestFile = "probe-request"

// RecorderSize is the flight recorder's size that gorun sets where the
// user did not (TORCH_FR_BUFFER_SIZE): enough for the straggler watch's
// window and a hang's history, small enough to read every interval.
const RecorderSize = 512

// SnapshotFile and StacksFile are the names of a worker's snapshot and of
// the stacks it writes on request, in its folder.
const (
	SnapshotFile = "probe.json"
	StacksFile   = "stacks.txt"
)

// Install writes the probe's module, sitecustomize.py, into folder, which
// the caller made private (0700, its own) and puts first on the workers'
// PYTHONPATH.
func Install(folder string) error {
	path := filepath.Join(folder, "sitecustomize.py")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, module, 0o600); err != nil {
		return fmt.Errorf("worker probe: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("worker probe: %w", err)
	}
	return nil
}

// PythonPath returns PYTHONPATH with folder first (cur: the user's value,
// kept after it).
func PythonPath(folder, cur string) string {
	if cur == "" {
		return folder
	}
	return folder + string(os.PathListSeparator) + cur
}

// Interval is the probe's snapshot interval for a hang timeout (0: none):
// a second, or a tenth of the timeout when that is shorter, at least
// 50 ms.
func Interval(hangTimeout time.Duration) time.Duration {
	d := time.Second
	if hangTimeout > 0 {
		d = min(d, hangTimeout/10)
	}
	return max(d, 50*time.Millisecond)
}

// Frame is one frame of a Python stack: file, line and function.
type Frame struct {
	File string
	Line int
	Func string
}

// UnmarshalJSON reads the probe's [file, line, function].
func (f *Frame) UnmarshalJSON(b []byte) error {
	var raw []json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil || len(raw) != 3 {
		return fmt.Errorf("stack frame %s: want [file, line, function]", b)
	}
	if err := json.Unmarshal(raw[0], &f.File); err != nil {
		return fmt.Errorf("stack frame file: %w", err)
	}
	if err := json.Unmarshal(raw[1], &f.Line); err != nil {
		return fmt.Errorf("stack frame line: %w", err)
	}
	if err := json.Unmarshal(raw[2], &f.Func); err != nil {
		return fmt.Errorf("stack frame function: %w", err)
	}
	return nil
}

// String is "file:line in function".
func (f Frame) String() string { return fmt.Sprintf("%s:%d in %s", f.File, f.Line, f.Func) }

// Recorder is the newest part of PyTorch's flight recorder in a
// snapshot.
type Recorder struct {
	PGConfig map[string]watchdog.PGConfig `json:"pg_config"`
	PGStatus map[string]watchdog.PGStatus `json:"pg_status"`
	Entries  []watchdog.Entry             `json:"entries"`
}

// Snapshot is what a worker's probe last wrote.
type Snapshot struct {
	Version int   `json:"version"`
	PID     int   `json:"pid"`
	TimeNs  int64 `json:"time_ns"`
	CPUNs   int64 `json:"cpu_ns"`
	// Stack is the main thread's, innermost frame first.
	Stack []Frame `json:"stack"`
	// Steps counts the optimizer steps seen (PyTorch 2.x; StepHook false
	// where the hook could not be set), StepTimesNs the newest ones'
	// times.
	Steps       int64   `json:"steps"`
	StepTimesNs []int64 `json:"step_times_ns"`
	StepHook    bool    `json:"step_hook"`
	// FirstStepNs is when the first optimizer step ended (0: none).
	FirstStepNs int64 `json:"first_step_ns"`
	// Saves counts the checkpoints the script wrote (torch.save and
	// torch.distributed.checkpoint.save calls that returned), the last at
	// LastSaveNs after StepsAtSave optimizer steps.
	Saves       int   `json:"saves"`
	LastSaveNs  int64 `json:"last_save_ns"`
	StepsAtSave int64 `json:"steps_at_save"`
	// Dumped is the last request id served.
	Dumped string `json:"dumped"`
	// Rank and WorldSize are torch.distributed's, once initialised (Rank
	// nil before).
	Rank      *int      `json:"rank"`
	WorldSize int       `json:"world_size"`
	Recorder  *Recorder `json:"flight_recorder"`
}

// Time is when the snapshot was taken.
func (s Snapshot) Time() time.Time { return time.Unix(0, s.TimeNs) }

// maxSnapshot bounds a snapshot file: 64 entries and 16 frames are tens
// of KiB.
const maxSnapshot = 4 << 20

// Read reads a worker's snapshot: ok is false when there is none yet. A
// snapshot that is not the probe's (a link, a FIFO, too big, not its
// JSON) is an error that names the file.
func Read(path string) (s Snapshot, ok bool, err error) {
	f, st, err := private.OpenRegular(path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, false, nil
	}
	if errors.Is(err, syscall.ELOOP) {
		return s, false, fmt.Errorf("worker probe: %s is a symbolic link; want the probe's regular file", path)
	}
	if err != nil {
		return s, false, fmt.Errorf("worker probe: %w", err)
	}
	defer f.Close()
	if st.Size() > maxSnapshot {
		return s, false, fmt.Errorf("worker probe: %s is %d bytes, above %d MiB", path, st.Size(), maxSnapshot>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSnapshot+1))
	if err != nil {
		return s, false, fmt.Errorf("worker probe: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, false, fmt.Errorf("worker probe: %s: %w", path, err)
	}
	return s, true, nil
}

// Request writes a new request id into the attempt's request file (path):
// every worker's probe writes its stacks and flight recorder once.
func Request(path, id string) error {
	if strings.ContainsAny(id, "\n\r") || id == "" {
		return fmt.Errorf("worker probe: request id %q: want one line", id)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(id+"\n"), 0o600); err != nil {
		return fmt.Errorf("worker probe: %w", err)
	}
	return os.Rename(tmp, path)
}

// MarshalJSON writes the probe's form, [file, line, function].
func (f Frame) MarshalJSON() ([]byte, error) {
	return json.Marshal([]any{f.File, f.Line, f.Func})
}
