package jobstore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/storecmd"
	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
	"github.com/gorun-dev/gorun/internal/sys/proc"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
)

// memberStopTimeout bounds a member's clean stop (etcd hands its
// leadership over first) before it is killed.
const memberStopTimeout = 10 * time.Second

// Restarts of a member that ended (killed, or exited: etcd exits when it
// runs out of descriptors) are spaced from memberRestartDelay, doubling
// up to memberRestartMaxDelay; after memberMaxFailedStarts starts in a
// row that never served, the node goes on as a client of the others.
const (
	memberRestartDelay    = 100 * time.Millisecond
	memberRestartMaxDelay = 5 * time.Second
	memberMaxFailedStarts = 5
)

// MemberTakenExit is the exit code of a store member (`gorun store
// --cluster --member`) whose place the store went on without (etcd:
// "already bootstrapped"); the agent that runs it then goes on as a
// client of the others.
const MemberTakenExit = 3

// ErrMemberTaken: the store went on without this member while it was
// gone, and gave its place away; StartServer returns it, and it is the
// error of a member's first start that exited MemberTakenExit.
var ErrMemberTaken = errors.New("the store went on without this member (its place is taken)")

// MemberProcess is this node's member of the job's store of several
// members, run as a companion process (`gorun-etcd store --cluster
// --member`) so that the store and the agent fail apart: a member killed
// on its own (SIGKILL, the kernel's OOM killer, an exit) is started again by the
// agent from its data folder and rejoins the store as the same member,
// while the agent and its workers go on as clients of the others. The
// member dies with the agent (parent-death signal); the folder is the
// agent's locked temporary one, swept by the next gorun if the agent is
// killed.
type MemberProcess struct {
	argv   []string
	client string // where it serves clients
	token  rendezvous.Token
	what   string // "member 1", for the log
	dir    *tempdir.Dir
	log    logrus.FieldLogger
	stderr io.Writer

	mu   sync.Mutex
	proc *proc.Process // the running member, nil between runs
	// stdin is the running member's standard input: closing it stops
	// the member, which ignores stop signals (a scheduler's, meant for
	// the job's processes).
	stdin    io.WriteCloser
	stopping bool
	stop     chan struct{} // closed by Close
	done     chan struct{} // closed when the supervisor has returned
}

// startMember starts member index of the store whose members are members
// and returns once it serves (a majority of the members run), it fails,
// or ctx ends.
func startMember(ctx context.Context, cfg HostConfig, token rendezvous.Token, members []Member, index int, log logrus.FieldLogger) (*MemberProcess, error) {
	var peers []string
	for _, m := range members {
		peers = append(peers, m.Peer)
	}
	return runMember(ctx, cfg, token, log, fmt.Sprintf("member %d", index), members[index].Client,
		storecmd.Arg(storecmd.Cluster, strings.Join(peers, ",")), storecmd.Arg(storecmd.Member, strconv.Itoa(index)), storecmd.Arg(storecmd.ReadyTimeout, cfg.ReadyTimeout.String()))
}

// JoinMember starts member name of a running store, which added it as a
// learner at peer (initial: the store's members, as Server.AddLearner
// gave them), serving clients at client, in a companion process, and
// returns once it serves. Its Close stops it.
func JoinMember(ctx context.Context, cfg HostConfig, token rendezvous.Token, name, client, peer, initial string, log logrus.FieldLogger) (*MemberProcess, error) {
	return runMember(ctx, cfg, token, log, "member "+name, client,
		storecmd.Arg(storecmd.PeerListen, peer), storecmd.Arg(storecmd.Join, initial), storecmd.Arg(storecmd.Name, name), storecmd.Arg(storecmd.ReadyTimeout, cfg.ReadyTimeout.String()))
}

// runMember starts a member (what, serving clients at client; args: its
// place in the store) in a companion process, and returns once it serves.
func runMember(ctx context.Context, cfg HostConfig, token rendezvous.Token, log logrus.FieldLogger, what, client string, args ...string) (*MemberProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("host %s of the embedded store: this program's path: %w", what, err)
	}
	dir, err := tempdir.New("store-member")
	if err != nil {
		return nil, fmt.Errorf("host %s of the embedded store: data folder: %w", what, err)
	}
	argv := append([]string{exe, storecmd.Command, storecmd.Arg(storecmd.Listen, client)}, args...)
	argv = append(argv, storecmd.Arg(storecmd.DataDir, dir.Path()), storecmd.Arg(storecmd.LogLevel, cfg.LogLevel),
		"--"+storecmd.TokenStdin, "--"+storecmd.StopOnStdinClose, storecmd.Arg(storecmd.Prefix, cfg.Prefix))
	if cfg.TLS.CertFile != "" {
		argv = append(argv, storecmd.Arg(storecmd.Cert, cfg.TLS.CertFile), storecmd.Arg(storecmd.Key, cfg.TLS.KeyFile))
		if cfg.TLS.TrustedCAFile != "" {
			argv = append(argv, storecmd.Arg(storecmd.CACert, cfg.TLS.TrustedCAFile))
		}
	}
	m := &MemberProcess{argv: argv, client: client, token: token, what: what, dir: dir, log: log, stderr: os.Stderr,
		stop: make(chan struct{}), done: make(chan struct{})}
	ready := make(chan error, 1)
	go m.supervise(ready)
	select {
	case err = <-ready:
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		m.Close()
		return nil, fmt.Errorf("host %s of the embedded store at %s: %w", what, client, err)
	}
	return m, nil
}

// supervise runs the member until Close, starting it again, from its
// data, whenever it ends: killed, or exited (etcd exits when it runs out
// of descriptors), unless its place was given away. The first start's outcome goes to
// ready: nil once it serves, else why it did not.
func (m *MemberProcess) supervise(ready chan<- error) {
	defer close(m.done)
	delay := memberRestartDelay
	failed := 0 // starts in a row that never served
	for attempt := 0; ; attempt++ {
		served, status, err := m.runOnce(ready)
		first := ready != nil
		ready = nil // only the first start reports there
		m.mu.Lock()
		stopping := m.stopping
		m.mu.Unlock()
		if stopping || (first && !served) {
			return // a first start that failed is startMember's to report
		}
		if served {
			failed, delay = 0, memberRestartDelay
		} else {
			failed++
		}
		how := fmt.Sprintf("exited with code %d", status.ExitStatus())
		if status.Signaled() {
			how = fmt.Sprintf("was killed (%v)", status.Signal())
		}
		switch {
		case err != nil:
			m.log.Errorf("%s of the job's store: %v; this node goes on as a client of the other members", m.what, err)
			return
		case status.Exited() && status.ExitStatus() == MemberTakenExit:
			m.log.Errorf("%s of the job's store: %v; this node goes on as a client of the other members", m.what, ErrMemberTaken)
			return
		case failed >= memberMaxFailedStarts:
			m.log.Errorf("%s of the job's store %s, and %d starts in a row did not serve; this node goes on as a client of the other members", m.what, how, failed)
			return
		}
		m.log.Warnf("%s of the job's store %s; starting it again from its data in %s", m.what, how, m.dir.Path())
		if !ctxtime.SleepUnless(m.stop, delay) {
			return
		}
		delay = min(2*delay, memberRestartMaxDelay)
	}
}

// runOnce starts the member and waits for it to end. served says whether
// it said it serves; err is a failure to start it at all. A non-nil ready
// gets the outcome of the start.
func (m *MemberProcess) runOnce(ready chan<- error) (served bool, status syscall.WaitStatus, err error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return false, 0, err
	}
	defer inW.Close()
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		return false, 0, err
	}
	defer outR.Close()
	command := func() *exec.Cmd {
		cmd := exec.Command(m.argv[0], m.argv[1:]...)
		cmd.Env = withoutKeys(os.Environ(), rendezvous.TokenEnv, rendezvous.TokenFileEnv, rendezvous.PasswordEnv, workerenv.StorePassword)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, m.stderr
		return cmd
	}
	m.mu.Lock()
	if m.stopping {
		m.mu.Unlock()
		inR.Close()
		outW.Close()
		return false, 0, nil
	}
	// Its own session: a Ctrl-C at the terminal reaches the agent, which
	// stops the member after the workers, and a Ctrl-Z during the fork
	// cannot stop it before its exec.
	p, started := proc.Start(command, proc.Options{Setsid: true})
	err = <-started
	inR.Close() // the child's ends
	outW.Close()
	if err == nil {
		m.proc, m.stdin = p, inW
		// The token's line; the pipe stays open while the member serves.
		if _, werr := io.WriteString(inW, string(m.token)+"\n"); werr != nil {
			_ = p.Signal(syscall.SIGKILL) // its end is reported below
		}
	}
	m.mu.Unlock()
	if err != nil {
		if ready != nil {
			ready <- err
		}
		return false, 0, err
	}
	lines := bufio.NewScanner(outR)
	for lines.Scan() {
		if !served && storecmd.Serving(lines.Text()) {
			served = true
			m.log.Infof("%s of the job's store serves at %s (pid %d; authentication on; peers over mutual TLS)", m.what, m.client, p.Pid)
			if ready != nil {
				ready <- nil
				ready = nil
			}
		}
	}
	<-p.Done()
	m.mu.Lock()
	m.proc, m.stdin = nil, nil
	m.mu.Unlock()
	state, _ := p.State()
	if state != nil {
		status, _ = state.Sys().(syscall.WaitStatus)
	}
	if ready != nil {
		if status.Exited() && status.ExitStatus() == MemberTakenExit {
			ready <- ErrMemberTaken
		} else {
			ready <- fmt.Errorf("the store member exited before it served (%v; its errors are above)", state)
		}
	}
	return served, status, nil
}

// Close stops the member (its standard input closed: etcd hands its
// leadership over; SIGKILL after memberStopTimeout) and removes its data.
// It is safe to call more than once.
func (m *MemberProcess) Close() error {
	m.mu.Lock()
	already := m.stopping
	m.stopping = true
	stdin := m.stdin
	m.mu.Unlock()
	if !already {
		close(m.stop)
		if stdin != nil {
			_ = stdin.Close()
		}
	}
	if ctxtime.SleepUnless(m.done, memberStopTimeout) {
		m.mu.Lock()
		if m.proc != nil {
			_ = m.proc.Signal(syscall.SIGKILL)
		}
		m.mu.Unlock()
		<-m.done
	}
	if already {
		return nil
	}
	if err := m.dir.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s of the job's store: remove its data: %w", m.what, err)
	}
	return nil
}

// withoutKeys is env without the variables named keys.
func withoutKeys(env []string, keys ...string) []string {
	out := env[:0:0]
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		keep := true
		for _, k := range keys {
			if name == k {
				keep = false
				break
			}
		}
		if keep {
			out = append(out, kv)
		}
	}
	return out
}

// MemberPorts picks the client and peer addresses of a member on this
// node (addr): the endpoint's port and the next when both are free here
// (what a firewall opened for the store), else two the system gives.
func MemberPorts(ctx context.Context, addr string, port int) (client, peer string, err error) {
	try := func(p1, p2 int) (string, string, error) {
		var ports [2]int
		for i, p := range []int{p1, p2} {
			listen, err := ListenAddress(ctx, net.JoinHostPort(addr, strconv.Itoa(p)))
			if err != nil {
				return "", "", err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return "", "", err
			}
			defer ln.Close()
			ports[i] = ln.Addr().(*net.TCPAddr).Port
		}
		return net.JoinHostPort(addr, strconv.Itoa(ports[0])), net.JoinHostPort(addr, strconv.Itoa(ports[1])), nil
	}
	if port > 0 && port < 65535 {
		if client, peer, err = try(port, port+1); err == nil {
			return client, peer, nil
		}
	}
	client, peer, err = try(0, 0)
	if err != nil {
		return "", "", fmt.Errorf("no ports for a store member at %s: %w", addr, err)
	}
	return client, peer, nil
}
