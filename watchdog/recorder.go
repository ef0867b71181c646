package watchdog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// DefaultBufferSize is the flight recorder's capacity per process, as
// PyTorch's TORCH_FR_BUFFER_SIZE default.
const DefaultBufferSize = 2000

// DumpVersion is the version field of a dump: PyTorch's flight-recorder
// layout (entries, pg_config, pg_status) of version 2.4, plus gorun's
// rank, world_size, reason and time_dumped_ns.
const DumpVersion = "2.4"

// BufferSizeFromEnv reads the recorder's capacity: GORUN_FR_BUFFER_SIZE,
// else PyTorch's TORCH_FR_BUFFER_SIZE or TORCH_NCCL_TRACE_BUFFER_SIZE,
// else DefaultBufferSize. 0 turns the recorder off.
func BufferSizeFromEnv() (int, error) {
	for _, name := range []string{"GORUN_FR_BUFFER_SIZE", workerenv.FlightRecorderSize, workerenv.NCCLTraceBufferSize} {
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("watchdog: %s=%q: want a number of entries, 0 or more", name, v)
		}
		return n, nil
	}
	return DefaultBufferSize, nil
}

// Entry states, as PyTorch names them.
const (
	StateScheduled = "scheduled"
	StateStarted   = "started"
	StateCompleted = "completed"
)

// Entry is one collective or point-to-point operation, with PyTorch's
// flight-recorder fields.
type Entry struct {
	RecordID        int64     `json:"record_id"`
	PGID            int       `json:"pg_id"`
	ProcessGroup    [2]string `json:"process_group"` // name, description
	CollectiveSeqID int64     `json:"collective_seq_id"`
	P2PSeqID        int64     `json:"p2p_seq_id"`
	OpID            int64     `json:"op_id"`
	ProfilingName   string    `json:"profiling_name"` // e.g. "gorun:all_reduce"
	TimeCreatedNs   int64     `json:"time_created_ns"`
	// Host times at which the watchdog saw the operation start and end
	// (nil before).
	TimeDiscoveredStartedNs   *int64    `json:"time_discovered_started_ns"`
	TimeDiscoveredCompletedNs *int64    `json:"time_discovered_completed_ns"`
	DurationMs                *float64  `json:"duration_ms"`
	InputSizes                [][]int64 `json:"input_sizes"`
	InputDtypes               []string  `json:"input_dtypes"`
	OutputSizes               [][]int64 `json:"output_sizes"`
	OutputDtypes              []string  `json:"output_dtypes"`
	State                     string    `json:"state"`
	// Retired: no longer watched (completed, or failed or timed out).
	Retired   bool  `json:"retired"`
	TimeoutMs int64 `json:"timeout_ms"`
	IsP2P     bool  `json:"is_p2p"`
}

// PGStatus is a group's last enqueued, started and completed collective
// sequence numbers (-1: none), as PyTorch's pg_status.
type PGStatus struct {
	LastEnqueued  int64 `json:"last_enqueued_collective"`
	LastStarted   int64 `json:"last_started_collective"`
	LastCompleted int64 `json:"last_completed_collective"`
}

// PGConfig describes a group: its name, description and global ranks.
type PGConfig struct {
	Name  string `json:"name"`
	Desc  string `json:"desc"`
	Ranks string `json:"ranks"` // "[0, 1, 2]", as PyTorch writes it
}

// Dump is one rank's flight recorder, as written to disk.
type Dump struct {
	Version      string              `json:"version"`
	Rank         int                 `json:"rank"`
	WorldSize    int                 `json:"world_size"`
	Reason       string              `json:"reason"`
	TimeDumpedNs int64               `json:"time_dumped_ns"`
	PGConfig     map[string]PGConfig `json:"pg_config"`
	PGStatus     map[string]PGStatus `json:"pg_status"`
	Entries      []Entry             `json:"entries"`
}

// Recorder is a bounded ring of Entries (the flight recorder): the
// newest max entries are kept. It is safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	max     int
	ring    []Entry // record id i is at i % max while it is among the newest
	next    int64   // the next record id
	status  map[int]*PGStatus
	configs map[int]PGConfig
}

// NewRecorder keeps the newest size entries (0: records nothing).
func NewRecorder(size int) *Recorder {
	return &Recorder{max: size, status: map[int]*PGStatus{}, configs: map[int]PGConfig{}}
}

// Enabled reports whether the recorder keeps anything.
func (r *Recorder) Enabled() bool { return r != nil && r.max > 0 }

// AddGroup describes group pgID for dumps.
func (r *Recorder) AddGroup(pgID int, name, desc string, ranks []int) {
	if !r.Enabled() {
		return
	}
	b, _ := json.Marshal(ranks)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.configs[pgID] = PGConfig{Name: name, Desc: desc, Ranks: string(b)}
	if r.status[pgID] == nil {
		r.status[pgID] = &PGStatus{LastEnqueued: -1, LastStarted: -1, LastCompleted: -1}
	}
}

// Record adds e as scheduled at time now and returns its record id (-1
// when the recorder is off).
func (r *Recorder) Record(e Entry, now time.Time) int64 {
	if !r.Enabled() {
		return -1
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e.RecordID = r.next
	r.next++
	e.TimeCreatedNs = now.UnixNano()
	e.State = StateScheduled
	if len(r.ring) < r.max {
		r.ring = append(r.ring, e)
	} else {
		r.ring[e.RecordID%int64(r.max)] = e
	}
	if st := r.statusOf(e.PGID); !e.IsP2P {
		st.LastEnqueued = e.CollectiveSeqID
	}
	return e.RecordID
}

func (r *Recorder) statusOf(pgID int) *PGStatus {
	st := r.status[pgID]
	if st == nil {
		st = &PGStatus{LastEnqueued: -1, LastStarted: -1, LastCompleted: -1}
		r.status[pgID] = st
	}
	return st
}

// entry is record id's entry while it is kept (nil after it was
// overwritten); r.mu held.
func (r *Recorder) entry(id int64) *Entry {
	if id < 0 || id >= r.next || id < r.next-int64(r.max) {
		return nil
	}
	return &r.ring[id%int64(r.max)]
}

// update runs fn on record id's entry, if kept, and on its group's
// status.
func (r *Recorder) update(id int64, fn func(e *Entry, st *PGStatus)) {
	if !r.Enabled() {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e := r.entry(id); e != nil {
		fn(e, r.statusOf(e.PGID))
	}
}

// Started marks record id started at now.
func (r *Recorder) Started(id int64, now time.Time) {
	r.update(id, func(e *Entry, st *PGStatus) {
		if e.TimeDiscoveredStartedNs != nil {
			return
		}
		ns := now.UnixNano()
		e.TimeDiscoveredStartedNs = &ns
		if e.State == StateScheduled {
			e.State = StateStarted
		}
		if !e.IsP2P && e.CollectiveSeqID > st.LastStarted {
			st.LastStarted = e.CollectiveSeqID
		}
	})
}

// Completed marks record id completed at now and retires it.
func (r *Recorder) Completed(id int64, now time.Time) {
	r.update(id, func(e *Entry, st *PGStatus) {
		if e.State == StateCompleted {
			return
		}
		ns := now.UnixNano()
		if e.TimeDiscoveredStartedNs == nil {
			e.TimeDiscoveredStartedNs = &ns
		}
		e.TimeDiscoveredCompletedNs = &ns
		ms := float64(ns-*e.TimeDiscoveredStartedNs) / 1e6
		e.DurationMs = &ms
		e.State, e.Retired = StateCompleted, true
		if !e.IsP2P && e.CollectiveSeqID > st.LastCompleted {
			st.LastCompleted = e.CollectiveSeqID
		}
	})
}

// Retire marks record id as no longer watched without completing it (it
// failed or timed out).
func (r *Recorder) Retire(id int64) {
	r.update(id, func(e *Entry, _ *PGStatus) { e.Retired = true })
}

// Dump copies the recorder's state, oldest entry first.
func (r *Recorder) Dump(rank, worldSize int, reason string, now time.Time) Dump {
	d := Dump{Version: DumpVersion, Rank: rank, WorldSize: worldSize, Reason: reason, TimeDumpedNs: now.UnixNano(),
		PGConfig: map[string]PGConfig{}, PGStatus: map[string]PGStatus{}, Entries: []Entry{}}
	if !r.Enabled() {
		return d
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for id := max(0, r.next-int64(r.max)); id < r.next; id++ {
		d.Entries = append(d.Entries, *r.entry(id))
	}
	for id, c := range r.configs {
		d.PGConfig[strconv.Itoa(id)] = c
	}
	for id, st := range r.status {
		d.PGStatus[strconv.Itoa(id)] = *st
	}
	return d
}

// DumpFileName is rank's dump file in a dump directory.
func DumpFileName(rank int) string { return fmt.Sprintf(dumpPrefix+"%d"+dumpSuffix, rank) }

// The dump file's name around its rank, and the glob of every rank's.
const (
	dumpPrefix = "fr_trace_rank_"
	dumpSuffix = ".json"
	dumpGlob   = dumpPrefix + "*" + dumpSuffix
)

// ParseDumpFileName is the rank whose dump name is (DumpFileName's
// inverse); ok is false for any other name.
func ParseDumpFileName(name string) (rank int, ok bool) {
	s, ok := strings.CutPrefix(name, dumpPrefix)
	if !ok {
		return 0, false
	}
	if s, ok = strings.CutSuffix(s, dumpSuffix); !ok {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || DumpFileName(n) != name {
		return 0, false
	}
	return n, true
}

// WriteDump writes d into dir as DumpFileName(d.Rank), through a
// temporary file so that a reader never sees half a dump. Folders it
// makes are 0700 and the dump 0600 (a dump names the job's operations and
// peers); the temporary file is never a link another user planted.
func WriteDump(dir string, d Dump) (string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("watchdog: flight recorder dump: %w", err)
	}
	b, err := json.MarshalIndent(d, "", " ")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, DumpFileName(d.Rank))
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("watchdog: flight recorder dump: %w", err)
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("watchdog: flight recorder dump: %w", err)
	}
	_, err = f.Write(append(b, '\n'))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("watchdog: flight recorder dump: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return "", fmt.Errorf("watchdog: flight recorder dump: %w", err)
	}
	return path, nil
}

// MaxDumpBytes bounds a dump that ReadDump reads: far above a recorder's
// (TORCH_NCCL_TRACE_BUFFER_SIZE entries of a few hundred bytes each), so
// that a file that is not one (a sparse file of gigabytes) costs nothing.
const MaxDumpBytes = 64 << 20

// ReadDump reads one rank's dump: a regular file (not through a link, not
// blocking on a FIFO) of at most MaxDumpBytes.
func ReadDump(path string) (Dump, error) {
	d, _, err := readDump(path)
	return d, err
}

// readDump is ReadDump, which also returns how many JSON values the dump
// holds (countValues).
func readDump(path string) (Dump, int, error) {
	var d Dump
	f, st, err := private.OpenRegular(path)
	switch {
	case errors.Is(err, private.ErrNotRegular):
		return d, 0, fmt.Errorf("%w (skipped)", err)
	case err != nil:
		return d, 0, err
	}
	defer f.Close()
	if st.Size() > MaxDumpBytes {
		return d, 0, fmt.Errorf("%s: %d bytes, above the %d MiB a flight recorder dump can hold (skipped)", path, st.Size(), MaxDumpBytes>>20)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxDumpBytes+1))
	if err != nil {
		return d, 0, err
	}
	return parseDump(path, b)
}

// Bounds of what one dump may hold, checked before its entries and
// groups are decoded (an empty entry, "{}", takes three bytes on disk
// and a kilobyte decoded): far above PyTorch's recorder (2,000 entries
// by default, TORCH_NCCL_TRACE_BUFFER_SIZE).
const (
	MaxDumpEntries = 1 << 17
	MaxDumpGroups  = 1 << 16
	// MaxDumpValues bounds the JSON values a dump holds at any depth
	// (one entry's list of sizes may hold millions of small ones, each
	// some 50 bytes decoded): a real recorder's 2,000 entries hold some
	// 100,000.
	MaxDumpValues = 1 << 22
)

// parseDump reads a dump's JSON and bounds what it claims; it returns
// how many JSON values the dump holds.
func parseDump(path string, b []byte) (Dump, int, error) {
	bad := func(format string, a ...any) (Dump, int, error) {
		return Dump{}, 0, fmt.Errorf("%s: not a flight recorder dump: "+format, append([]any{path}, a...)...)
	}
	values := countValues(b, MaxDumpValues)
	if values > MaxDumpValues {
		return bad("it holds more than %d JSON values", MaxDumpValues)
	}
	var counts struct {
		Entries  json.RawMessage `json:"entries"`
		PGConfig json.RawMessage `json:"pg_config"`
		PGStatus json.RawMessage `json:"pg_status"`
	}
	if err := json.Unmarshal(b, &counts); err != nil {
		return bad("%w", err)
	}
	for _, f := range []struct {
		name  string
		raw   json.RawMessage
		limit int
	}{{"entries", counts.Entries, MaxDumpEntries}, {"pg_config", counts.PGConfig, MaxDumpGroups}, {"pg_status", counts.PGStatus, MaxDumpGroups}} {
		if n := countJSON(f.raw, f.limit); n > f.limit {
			return bad("%q holds more than %d items", f.name, f.limit)
		}
	}
	var d Dump
	if err := json.Unmarshal(b, &d); err != nil {
		return bad("%w", err)
	}
	switch {
	case d.WorldSize < 0 || d.WorldSize > MaxWorldSize:
		return bad("world_size %d is outside 0..%d", d.WorldSize, MaxWorldSize)
	case d.Rank < 0 || (d.WorldSize > 0 && d.Rank >= d.WorldSize):
		return bad("rank %d is outside 0..%d (world_size %d)", d.Rank, max(d.WorldSize-1, 0), d.WorldSize)
	}
	return d, values, nil
}

// MaxWorldSize bounds the world size a dump may claim: what the analysis
// lists of the ranks that did not dump is that long. The largest jobs
// run today have some 100,000 ranks.
const MaxWorldSize = 1 << 20

// countJSON counts the items of a JSON array or object, stopping past
// limit; anything else counts 0 (decoding then says what is wrong).
func countJSON(raw json.RawMessage, limit int) int {
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if d, ok := tok.(json.Delim); err != nil || !ok || (d != '[' && d != '{') {
		return 0
	}
	object := tok == json.Delim('{')
	n := 0
	for dec.More() && n <= limit {
		if object {
			if _, err := dec.Token(); err != nil {
				return n
			}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return n
		}
		n++
	}
	return n
}

// countValues counts the JSON values in b at any depth (arrays and
// objects count once, and each value in them), stopping past limit.
func countValues(b []byte, limit int) int {
	dec := json.NewDecoder(bytes.NewReader(b))
	n := 0
	for n <= limit {
		tok, err := dec.Token()
		if err != nil {
			return n
		}
		if d, ok := tok.(json.Delim); ok && (d == ']' || d == '}') {
			continue
		}
		n++
	}
	return n
}
