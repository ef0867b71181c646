package watchdog

import (
	"context"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestRecorderKeepsTheNewest(t *testing.T) {
	rec := NewRecorder(3)
	now := time.Unix(100, 0)
	for i := range 5 {
		rec.Record(Entry{CollectiveSeqID: int64(i), ProfilingName: "gorun:all_reduce"}, now)
	}
	rec.Started(0, now) // overwritten: ignored
	rec.Completed(4, now.Add(time.Second))
	d := rec.Dump(0, 1, "test", now)
	if len(d.Entries) != 3 || d.Entries[0].RecordID != 2 || d.Entries[2].RecordID != 4 {
		t.Fatalf("entries %+v", d.Entries)
	}
	if e := d.Entries[2]; e.State != StateCompleted || *e.DurationMs != 0 {
		t.Errorf("completed without a seen start: %+v (the start is taken as the completion)", e)
	}
	if st := d.PGStatus["0"]; st.LastEnqueued != 4 || st.LastCompleted != 4 || st.LastStarted != -1 {
		t.Errorf("pg_status %+v", st)
	}
	off := NewRecorder(0)
	if id := off.Record(Entry{}, now); id != -1 || len(off.Dump(0, 1, "", now).Entries) != 0 {
		t.Error("a recorder of size 0 records")
	}
}

func TestDumpRoundTrip(t *testing.T) {
	rec := NewRecorder(4)
	rec.AddGroup(0, "default_pg", "world", []int{0, 1, 2})
	id := rec.Record(Entry{CollectiveSeqID: 3, ProfilingName: "gorun:all_gather", InputSizes: [][]int64{{16}}, InputDtypes: []string{"float32"}}, time.Unix(1, 0))
	rec.Started(id, time.Unix(2, 0))
	dir := t.TempDir()
	path, err := WriteDump(dir, rec.Dump(1, 3, "SIGUSR1", time.Unix(3, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(path, "fr_trace_rank_1.json") {
		t.Errorf("path %s", path)
	}
	d, err := ReadDump(path)
	if err != nil {
		t.Fatal(err)
	}
	if d.Version != DumpVersion || d.Rank != 1 || d.PGConfig["0"].Ranks != "[0,1,2]" || d.Entries[0].State != StateStarted || d.Entries[0].InputSizes[0][0] != 16 {
		t.Errorf("dump %+v", d)
	}
}

// TestWriteDumpIsPrivate: the folders WriteDump makes are 0700, the dump
// 0600, and a link planted at the temporary file's name is neither
// followed nor written through.
func TestWriteDumpIsPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "attempt_0", "flight_recorder")
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		t.Fatal(err)
	}
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, filepath.Join(dir, DumpFileName(0)+".tmp")); err != nil {
		t.Fatal(err)
	}
	path, err := WriteDump(dir, NewRecorder(1).Dump(0, 1, "test", time.Unix(1, 0)))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(path); err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 {
		t.Errorf("dump %s: %v, %v; want a plain 0600 file", path, fi.Mode(), err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "keep" {
		t.Errorf("the link's target was written: %q", b)
	}
	fresh := filepath.Join(t.TempDir(), "a", "b")
	if _, err := WriteDump(fresh, NewRecorder(1).Dump(1, 2, "test", time.Unix(1, 0))); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{fresh, filepath.Dir(fresh)} {
		if fi, err := os.Stat(d); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("%s: %v, %v; want 0700", d, fi.Mode(), err)
		}
	}
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env, val string
		size     int
		bad      bool
	}{{"", "", DefaultBufferSize, false}, {"GORUN_FR_BUFFER_SIZE", "10", 10, false}, {"TORCH_FR_BUFFER_SIZE", "0", 0, false},
		{"TORCH_NCCL_TRACE_BUFFER_SIZE", "5", 5, false}, {"GORUN_FR_BUFFER_SIZE", "-1", 0, true}, {"GORUN_FR_BUFFER_SIZE", "lots", 0, true}} {
		for _, k := range []string{"GORUN_FR_BUFFER_SIZE", "TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE"} {
			t.Setenv(k, "")
		}
		if c.env != "" {
			t.Setenv(c.env, c.val)
		}
		n, err := BufferSizeFromEnv()
		if (err != nil) != c.bad || (!c.bad && n != c.size) || (c.bad && !strings.Contains(err.Error(), c.env)) {
			t.Errorf("%s=%q: %d, %v", c.env, c.val, n, err)
		}
	}
	for _, c := range []struct {
		env, val string
		mode     ErrorHandling
		bad      bool
	}{{"", "", TearDown, false}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3", SkipCleanUp, false}, {"NCCL_ASYNC_ERROR_HANDLING", "0", NoHandling, false},
		{"GORUN_ASYNC_ERROR_HANDLING", "2", CleanUpOnly, false}, {"GORUN_ASYNC_ERROR_HANDLING", "4", 0, true}} {
		for _, k := range []string{"GORUN_ASYNC_ERROR_HANDLING", "TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"} {
			t.Setenv(k, "")
		}
		if c.env != "" {
			t.Setenv(c.env, c.val)
		}
		m, err := ErrorHandlingFromEnv()
		if (err != nil) != c.bad || (!c.bad && m != c.mode) {
			t.Errorf("%s=%q: %v, %v", c.env, c.val, m, err)
		}
	}
}

// memStore is a Signal in memory.
type memStore struct {
	mu   sync.Mutex
	kv   map[string]string
	cond *sync.Cond
}

func newMemStore() *memStore {
	s := &memStore{kv: map[string]string{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

func (s *memStore) Set(_ context.Context, k, v string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[k] = v
	s.cond.Broadcast()
	return nil
}

func (s *memStore) Create(_ context.Context, k, v string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur, ok := s.kv[k]; ok {
		return cur, nil
	}
	s.kv[k] = v
	s.cond.Broadcast()
	return v, nil
}

func (s *memStore) Get(ctx context.Context, k string) (string, error) {
	stop := context.AfterFunc(ctx, func() { s.mu.Lock(); s.cond.Broadcast(); s.mu.Unlock() })
	defer stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if v, ok := s.kv[k]; ok {
			return v, nil
		}
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		s.cond.Wait()
	}
}

// The handler by mode: what is aborted, what ends the process, what the
// other ranks hear and what is dumped.
func TestHandlerModes(t *testing.T) {
	for _, c := range []struct {
		mode         ErrorHandling
		abort, exits bool
	}{{NoHandling, false, false}, {TearDown, true, true}, {CleanUpOnly, true, false}, {SkipCleanUp, false, true}} {
		st := newMemStore()
		var aborted bool
		exit := -1
		var log strings.Builder
		h := &Handler{Rank: 0, WorldSize: 1, WaitForDumps: true, DumpWait: time.Minute, Recorder: NewRecorder(5), DumpDir: t.TempDir(), Mode: c.mode, Signal: st,
			Abort: func() { aborted = true }, Exit: func(code int) { exit = code }, Log: &log}
		f := Failure{Kind: KindTimeout, Rank: 0, Op: "all_reduce", Seq: 4, Elapsed: 3 * time.Second, Timeout: 3 * time.Second}
		h.Handle(f)
		h.Handle(Failure{Kind: KindError, Err: "second"}) // ignored
		if aborted != c.abort || (exit == ExitCollectiveTimeout) != c.exits || (!c.exits && exit != -1) {
			t.Errorf("mode %d: aborted %v, exit %d", c.mode, aborted, exit)
		}
		if !strings.Contains(log.String(), "collective all_reduce (group 0, sequence number 4) ran for 3s") || strings.Contains(log.String(), "second") {
			t.Errorf("mode %d: log %q", c.mode, log.String())
		}
		if _, err := ReadDump(h.DumpDir + "/" + DumpFileName(0)); err != nil {
			t.Errorf("mode %d: %v", c.mode, err)
		}
		// Another rank hears of it and stops with ExitRemoteAbort.
		other := &Handler{Rank: 1, Mode: SkipCleanUp, Exit: func(code int) { exit = code }, Log: &log, Recorder: NewRecorder(1)}
		WatchSignal(context.Background(), st, other)
		if exit != ExitRemoteAbort || !strings.Contains(log.String(), "another rank failed first: rank 0: collective all_reduce") {
			t.Errorf("mode %d: the other rank: exit %d, log %q", c.mode, exit, log.String())
		}
	}
	// A stuck watchdog ends the process even without error handling.
	stuckExit := -1
	stuck := &Handler{Mode: NoHandling, Exit: func(code int) { stuckExit = code }, Log: &strings.Builder{}}
	stuck.Handle(Failure{Kind: KindStuck, Elapsed: time.Minute})
	if stuckExit != ExitWatchdogStuck {
		t.Errorf("stuck watchdog: exit %d", stuckExit)
	}
	// A rank does not act on its own report; a cancelled watch returns.
	st := newMemStore()
	_ = st.Set(context.Background(), SignalKey, `{"kind":"timeout","rank":0}`)
	self := &Handler{Rank: 0, Exit: func(int) { t.Error("acted on its own report") }, Log: &strings.Builder{}}
	WatchSignal(context.Background(), st, self)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	WatchSignal(ctx, newMemStore(), self)
}

// gatedStore is a memStore that says when a Get of key begins.
type gatedStore struct {
	*memStore
	key     string
	waiting chan struct{}
	once    sync.Once
}

func (s *gatedStore) Get(ctx context.Context, k string) (string, error) {
	if k == s.key {
		s.once.Do(func() { close(s.waiting) })
	}
	return s.memStore.Get(ctx, k)
}

// TestStopCutsTheDumpWait: a rank that waits for a dump that never comes
// (rank 1 was killed) and is then asked to stop (SIGTERM, as its agent
// does when the round ends) waits StopDumpGrace more, not DumpWait.
func TestStopCutsTheDumpWait(t *testing.T) {
	st := &gatedStore{memStore: newMemStore(), key: DumpedKey + "1", waiting: make(chan struct{})}
	var log strings.Builder
	exit := make(chan int, 1)
	h := &Handler{Rank: 0, WorldSize: 2, WaitForDumps: true, DumpWait: time.Hour, Recorder: NewRecorder(5), DumpDir: t.TempDir(),
		Mode: TearDown, Signal: st, Abort: func() {}, Exit: func(code int) { exit <- code }, Log: &log}
	go h.Handle(Failure{Kind: KindError, Rank: 0, Op: "all_reduce", Err: "peer closed"})
	<-st.waiting // signal.Notify is in place before this Get
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exit:
	case <-time.After(time.Minute):
		t.Fatal("still waiting for rank 1's dump a minute after SIGTERM")
	}
	if !strings.Contains(log.String(), "rank 0 asked to stop (terminated): waiting at most 1s more") {
		t.Errorf("log %q", log.String())
	}
}

// TestStopBeforeTheWaitCutsIt: the stop request may come before the
// wait for dumps begins: while this rank dumps (it used to be missed,
// and the rank waited the whole DumpWait, 10 s: a worker kill cost 10 s
// in 1 of 11 tries), or before the failure is handled at all, to a
// program that takes SIGTERM itself and says so (Stopping). Either way
// the rank waits StopDumpGrace at most.
func TestStopBeforeTheWaitCutsIt(t *testing.T) {
	// The program's own handler of SIGTERM (bin/ddp's NotifyContext): the
	// signal does not end the test binary.
	own := make(chan os.Signal, 1)
	signal.Notify(own, syscall.SIGTERM)
	defer signal.Stop(own)
	for _, tt := range []struct {
		name   string
		before func(h *Handler) // before Handle
		dump   func(h *Handler) // while this rank dumps
	}{
		{name: "SIGTERM while this rank dumps", dump: func(*Handler) {
			if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			<-own // delivered (to every channel that asks) before the dump goes on
		}},
		{name: "Stopping before the failure", before: func(h *Handler) { h.Stopping() }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := &gatedStore{memStore: newMemStore(), key: DumpedKey + "1", waiting: make(chan struct{})}
			exit := make(chan int, 1)
			h := &Handler{Rank: 0, WorldSize: 2, WaitForDumps: true, DumpWait: time.Hour, Recorder: NewRecorder(5), DumpDir: t.TempDir(),
				Mode: TearDown, Signal: st, Abort: func() {}, Exit: func(code int) { exit <- code }, Log: io.Discard}
			if tt.dump != nil {
				h.BeforeDump = func() { tt.dump(h) }
			}
			if tt.before != nil {
				tt.before(h)
			}
			go h.Handle(Failure{Kind: KindError, Rank: 0, Op: "all_reduce", Err: "peer closed"})
			select {
			case <-exit:
			case <-time.After(time.Minute):
				t.Fatal("still waiting for rank 1's dump a minute after the stop request")
			}
		})
	}
}

// TestReadDumpRefusesWhatIsNotADump: a sparse file of gigabytes, a FIFO
// or a link where a dump should be is refused at once, naming why,
// instead of read into memory or waited on.
func TestReadDumpRefusesWhatIsNotADump(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	huge := filepath.Join(dir, "huge.json")
	f, err := os.Create(huge)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(3 << 30); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	fifo := filepath.Join(dir, "fifo.json")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link.json")
	os.Symlink(huge, link)
	for _, tt := range []struct{ path, err string }{
		{huge, "above the 64 MiB"},
		{fifo, "not a regular file"},
		{link, "too many levels of symbolic links"},
	} {
		if _, err := ReadDump(tt.path); err == nil || !strings.Contains(err.Error(), tt.err) {
			t.Errorf("ReadDump(%s) = %v; want an error with %q", filepath.Base(tt.path), err, tt.err)
		}
	}
}
