package launcher

import (
	"bufio"
	_ "embed" // the warm interpreter's program
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// Warm interpreters (--warm-start): a restarted Python worker pays its
// interpreter's start and its imports again (`import torch` alone takes
// over a second, more from a shared file system). With --warm-start,
// gorun keeps for each local rank one interpreter started with the
// modules of --warm-imports imported, in the worker's environment less
// what changes from round to round. A (re)start hands it the round's
// command line and whole environment, and it runs the script as the
// interpreter would have (warmstart.py); gorun then starts the next one.
//
// What a module imported early may have read: the variables it looked up
// in os.environ while it was imported. The warm interpreter records them
// and the values it saw; handed a round that gives any of them another
// value (a module that reads RANK at import), it execs the worker's
// command line instead, a cold start in the same process, and warm start
// is off for the rest of the job, with a warning that names the module
// and the variable; an import that failed does the same. Variables read
// by native code (getenv: OpenMP's OMP_NUM_THREADS, CUDA's
// CUDA_VISIBLE_DEVICES) cannot be seen: gorun sets those once per job, as
// it does the PYTHON* variables the interpreter reads at its own start
// (a warm interpreter's and its worker's are the same by construction).
// docs/launcher.md lists what a script could still notice.
//
// Nothing waits for a warm interpreter: a worker handed to a warm interpreter that is still
// importing runs once the imports are done, as a cold worker would after
// its own; its stdout and stderr are the pipes the warm interpreter started with.

//go:embed warmstart.py
var warmStartProgram string

// DefaultWarmImport is the module --warm-start imports unless
// --warm-imports names others.
const DefaultWarmImport = "torch"

// maxWarmLine bounds a line of a warm interpreter's control socket (the warm interpreter
// sends lines of at most 4,000 bytes).
const maxWarmLine = 64 << 10

// isModuleName says whether s is a dotted Python module name.
func isModuleName(s string) bool {
	if s == "" {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if part == "" || (part[0] >= '0' && part[0] <= '9') {
			return false
		}
		for _, c := range part {
			if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c > 127) {
				return false
			}
		}
	}
	return true
}

// warmPool holds the warm interpreter interpreters of the node's local ranks. Its
// warm interpreters are the agent goroutine's; the listeners of their control
// sockets only turn warm start off.
type warmPool struct {
	cfg     *Config
	group   *jobGroup
	env     []string // every warm interpreter's environment, less its local rank's
	interps map[int]*warmInterp
	// talkers are the goroutines that read the warm interpreters' sockets and write
	// the workers' command lines to them.
	talkers sync.WaitGroup
	mu      sync.Mutex
	off     string // why warm start was turned off ("" while it is on)
}

// warmInterp is one warm interpreter, not yet a worker (or one that was just
// handed its worker).
type warmInterp struct {
	localRank int
	proc      *process
	exited    chan *process
	ctl       *os.File    // gorun's end of the control socket (fd 3)
	out       [2]*os.File // read ends of its stdout and stderr
	// heard is closed once the socket's listener has ended (and closed
	// ctl).
	heard chan struct{}
}

// newWarmPool returns the pool of a --warm-start job (nil without it);
// shared are the variables every worker gets whatever the round.
func newWarmPool(cfg *Config, group *jobGroup, shared []EnvVar) *warmPool {
	if !cfg.WarmStart {
		return nil
	}
	constant := append(slices.Clip(shared),
		EnvVar{workerenv.LocalWorldSize, strconv.Itoa(cfg.NprocPerNode)},
		EnvVar{workerenv.RoleName, cfg.Role},
		EnvVar{workerenv.MaxRestarts, strconv.Itoa(cfg.MaxRestarts)})
	return &warmPool{cfg: cfg, group: group, env: withEnv(withoutSecrets(cfg.Environ), constant), interps: map[int]*warmInterp{}}
}

// imports is --warm-imports, or the default.
func (wp *warmPool) imports() []string {
	if len(wp.cfg.WarmImports) > 0 {
		return wp.cfg.WarmImports
	}
	return []string{DefaultWarmImport}
}

// interpArgv is the command line of a warm interpreter: the interpreter, the warm
// program, what the worker runs (script, module or code) and its
// arguments.
func (wp *warmPool) interpArgv() []string {
	e := wp.cfg.Entrypoint
	mode, target, args := "script", e.Script, e.Args
	switch {
	case e.Module:
		mode = "module"
	case e.RunPath:
		mode, target, args = "code", runPathCode, append([]string{e.Script}, e.Args...)
	}
	argv := append(slices.Clip(e.Python), "-u", "-c", warmStartProgram, mode, target, strings.Join(wp.imports(), ","))
	return append(argv, args...)
}

// isOff says why warm start is off ("" while it is on).
func (wp *warmPool) isOff() string {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	return wp.off
}

// turnOff ends warm start for the rest of the job, saying why once; the
// agent's goroutine discards the warm interpreters at its next fill or take.
func (wp *warmPool) turnOff(why string) {
	wp.mu.Lock()
	defer wp.mu.Unlock()
	if wp.off != "" {
		return
	}
	wp.off = why
	wp.cfg.Log.Warnf("--warm-start: %s; warm start is off for this job: workers start cold, as without --warm-start", why)
}

// fill starts a warm interpreter for every local rank that has none (but the one
// that holds gorun's terminal: it runs in gorun's process group) and
// waits until each is forked.
func (wp *warmPool) fill(stdin stdinRoutes) {
	if wp == nil {
		return
	}
	if wp.isOff() != "" {
		wp.discardAll()
		return
	}
	argv := ignoringSignals(wp.interpArgv(), wp.cfg.workerIgnoredSignals())
	for lr := range wp.cfg.NprocPerNode {
		in, fg := stdin.forRank(lr)
		if wp.interps[lr] != nil || fg {
			continue
		}
		env := withEnv(wp.env, []EnvVar{{workerenv.LocalRank, strconv.Itoa(lr)}})
		s, err := wp.start(argv, env, in, lr)
		if err != nil {
			wp.turnOff(fmt.Sprintf("the interpreter for local rank %d could not be started: %v", lr, err))
			wp.discardAll()
			return
		}
		wp.interps[lr] = s
	}
}

// start starts one warm interpreter.
func (wp *warmPool) start(argv, env []string, stdin *os.File, lr int) (*warmInterp, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("control socket: %w", err)
	}
	// gorun's end is non-blocking, so that its reads and writes wait in
	// Go's poller and its Close ends them (a warm interpreter that never reads must
	// not hold a goroutine); the warm interpreter's end stays blocking.
	if err := syscall.SetNonblock(fds[0], true); err != nil {
		syscall.Close(fds[0])
		syscall.Close(fds[1])
		return nil, fmt.Errorf("control socket: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "warm-control"), os.NewFile(uintptr(fds[1]), "warm-control")
	defer theirs.Close()
	s := &warmInterp{localRank: lr, ctl: ours, exited: make(chan *process, 1), heard: make(chan struct{})}
	var childEnds [2]*os.File
	pipes := 2
	if wp.cfg.mergesStreams(lr) {
		pipes = 1 // its stderr is its stdout's pipe (onestream.go)
	}
	for i := range pipes {
		r, w, err := os.Pipe()
		if err != nil {
			closeAll(append(childEnds[:], s.ctl, s.out[0], s.out[1]))
			return nil, err
		}
		s.out[i], childEnds[i] = r, w
	}
	files := procFiles{stdin: stdin, stdout: childEnds[0], stderr: childEnds[1], extra: []*os.File{theirs}}
	if pipes == 1 {
		files.stderr = childEnds[0]
	}
	p, started := startProcessIn(argv, env, files, s.exited, 0, wp.group.cgroupFD(), wp.cfg.cpusOf(lr))
	err = <-started
	closeAll(childEnds[:])
	if err != nil {
		closeAll([]*os.File{s.ctl, s.out[0], s.out[1]})
		return nil, err
	}
	s.proc = p
	wp.group.started(p.Pid)
	wp.group.keep(p.Pid)
	if p.CgroupErr != nil {
		wp.group.noCgroup(p.CgroupErr)
	}
	wp.talkers.Add(1)
	go wp.listen(s) // ends when the interpreter closes its end or exits
	return s, nil
}

// listen reads what the warm interpreter says on its control socket until it closes
// it: "ready" and how many variables its imports read, or "failed" and
// why; then, once handed its worker, "warm", or why it execs the worker's
// command line instead: "cold" (warm start cannot be trusted with this
// job: it is turned off) or "fresh" (this start only: the script is not
// a source file that compiles, or its folder moved).
func (wp *warmPool) listen(s *warmInterp) {
	defer wp.talkers.Done()
	defer close(s.heard)
	defer s.ctl.Close()
	sc := bufio.NewScanner(s.ctl)
	sc.Buffer(nil, maxWarmLine)
	for sc.Scan() {
		word, rest, _ := strings.Cut(sc.Text(), " ")
		var why string
		switch word {
		case "ready":
			wp.cfg.Log.Debugf("--warm-start: local rank %d's interpreter (pid %d) is ready; its imports read %s environment variables", s.localRank, s.proc.Pid, rest)
		case "warm":
			wp.cfg.Log.Debugf("--warm-start: local rank %d runs in its warm interpreter (pid %d)", s.localRank, s.proc.Pid)
		case "failed", "cold", "fresh":
			if json.Unmarshal([]byte(rest), &why) != nil {
				why = rest
			}
			switch word {
			case "cold":
				wp.turnOff(fmt.Sprintf("local rank %d started cold: %s", s.localRank, why))
			case "fresh":
				// This start only: the next warm interpreters start from what is
				// there now.
				wp.cfg.Log.Infof("--warm-start: local rank %d starts cold this time: %s", s.localRank, why)
			default:
				wp.turnOff(why)
			}
		default:
			wp.cfg.Log.Warnf("--warm-start: local rank %d's interpreter (pid %d) said %.80q: want ready, failed, warm, cold or fresh", s.localRank, s.proc.Pid, sc.Text())
		}
	}
	if err := sc.Err(); err != nil {
		// Over maxWarmLine, or unreadable: the socket closes, and the
		// interpreter, handed a worker, sees it as gorun gone.
		wp.cfg.Log.Warnf("--warm-start: local rank %d's interpreter (pid %d): %v", s.localRank, s.proc.Pid, err)
	}
}

// take returns the warm interpreter that runs spec, or nil when the rank starts
// cold (there is none, it ended, or warm start is off). It does not wait
// for the warm interpreter's imports: the warm interpreter runs the worker once they are done.
func (wp *warmPool) take(spec WorkerSpec) *warmInterp {
	if wp == nil {
		return nil
	}
	if wp.isOff() != "" {
		wp.discardAll()
		return nil
	}
	s := wp.interps[spec.LocalRank]
	if s == nil {
		return nil
	}
	delete(wp.interps, spec.LocalRank)
	if s.proc.Ended() {
		wp.cfg.Log.Warnf("--warm-start: the interpreter of local rank %d %s before its round: starting the rank cold", spec.LocalRank, describeExit(s.proc.status()))
		wp.discard(s)
		return nil
	}
	return s
}

// activate makes s the worker of spec: it sends the worker's command
// line and environment, and the interpreter runs the script (or, where
// its imports cannot be trusted with this round, execs the command line).
// The message is written in the background: a warm interpreter still importing
// reads it once its imports are done (a large environment does not fit
// in the socket's buffer), and one that dies or is killed never does
// (the socket's close ends the write).
func (wp *warmPool) activate(s *warmInterp, spec WorkerSpec) {
	var b strings.Builder
	field := func(v string) { b.WriteString(v); b.WriteByte(0) }
	field(strconv.Itoa(len(spec.Argv)))
	for _, a := range spec.Argv {
		field(a)
	}
	for _, kv := range spec.Env {
		field(kv)
	}
	wp.group.unkeep(s.proc.Pid)
	msg := "go " + strconv.Itoa(b.Len()) + "\n" + b.String()
	wp.talkers.Add(1)
	go func() { // ends once written, or when the socket closes
		defer wp.talkers.Done()
		// A warm interpreter that died or closed its end meanwhile is that worker's
		// failure, reported with its exit: nothing to add.
		_, err := io.WriteString(s.ctl, msg)
		if err != nil && !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, os.ErrClosed) {
			wp.cfg.Log.Warnf("--warm-start: hand local rank %d to its warm interpreter (pid %d): %v", spec.LocalRank, s.proc.Pid, err)
		}
	}()
}

// discard kills a warm interpreter and waits until it is gone.
func (wp *warmPool) discard(s *warmInterp) {
	_ = s.proc.signalGroup(syscall.SIGKILL)
	<-s.proc.Done()
	wp.group.ended(s.proc.Pid)
	wp.group.unkeep(s.proc.Pid)
	<-s.heard // the socket's end
	closeAll(s.out[:])
}

// discardTaken discards the warm interpreters of ss that are not nil (taken for an
// attempt that could not start).
func (wp *warmPool) discardTaken(ss []*warmInterp) {
	for _, s := range ss {
		if s != nil {
			wp.discard(s)
		}
	}
}

// discardAll discards the warm interpreters not taken.
func (wp *warmPool) discardAll() {
	for lr, s := range wp.interps {
		wp.discard(s)
		delete(wp.interps, lr)
	}
}

// close discards the warm interpreters and waits for the talkers of the ones that
// became workers (every worker has exited when the agent closes it, and
// its socket has closed).
func (wp *warmPool) close() {
	if wp == nil {
		return
	}
	wp.discardAll()
	wp.talkers.Wait()
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			_ = f.Close()
		}
	}
}
