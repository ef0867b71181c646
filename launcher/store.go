package launcher

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/gorun-dev/gorun/internal/secret"
	"github.com/gorun-dev/gorun/internal/storecmd"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
)

// LocalStore is the key-value store of a single-node job (--standalone):
// an embedded etcd that runs in a companion process, `gorun-etcd store`,
// on a free loopback port. Workers find it in GORUN_STORE_ENDPOINTS. It
// starts beside the workers (nothing waits for it to be ready: a client
// retries its connection) and is killed once they are done. The data
// folder is this process's (a private temporary folder, swept by the next
// gorun if this one is killed), removed by Stop; the store keeps nothing
// that outlives the job.
type LocalStore struct {
	endpoint string
	dir      *tempdir.Dir
	proc     *process
}

// StartLocalStore starts `binary store` on a free port of 127.0.0.1,
// with the job's secret in its environment (workerenv.StorePassword; never on its
// command line, which every user can read). Its errors go to stderr; it
// dies with this process.
func StartLocalStore(binary string, stderr *os.File, jobSecret secret.Secret) (*LocalStore, error) {
	if !jobSecret.IsSet() {
		return nil, fmt.Errorf("local store: no job secret")
	}
	port, err := rendezvous.FreePort(rendezvous.DefaultLocalAddr)
	if err != nil {
		return nil, err
	}
	dir, err := tempdir.New("store")
	if err != nil {
		return nil, fmt.Errorf("local store: data folder: %w", err)
	}
	s := &LocalStore{endpoint: rendezvous.DefaultLocalAddr + ":" + strconv.Itoa(port), dir: dir}
	// etcd's own log lines are JSON for operators of a store, not for the
	// job's terminal: a failure to serve reaches the workers as errors.
	argv := []string{binary, storecmd.Command, storecmd.Arg(storecmd.Listen, s.endpoint), storecmd.Arg(storecmd.DataDir, dir.Path()), storecmd.Arg(storecmd.LogLevel, "panic")}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		dir.Remove()
		return nil, fmt.Errorf("local store: %w", err)
	}
	defer devnull.Close()
	env := withEnv(os.Environ(), []EnvVar{{workerenv.StorePassword, jobSecret.Reveal()}})
	// The lowest CPU priority: on a busy node the workers' own start-up
	// comes first, and only Go workers that use the store wait for it.
	proc, started := startProcess(argv, env, devnull, stderr, make(chan *process, 1), storeNice)
	if err := <-started; err != nil {
		dir.Remove()
		return nil, fmt.Errorf("local store: start %s: %w", binary, err)
	}
	s.proc = proc
	return s, nil
}

// storeNice is the local store's nice value: the lowest priority.
const storeNice = 19

// Endpoint is the store's client address, host:port.
func (s *LocalStore) Endpoint() string { return s.endpoint }

// Stop kills the store (its state dies with the job, so it needs no clean
// shutdown), waits for it and removes its data folder.
func (s *LocalStore) Stop() error {
	err := s.proc.signalGroup(syscall.SIGKILL)
	<-s.proc.Done()
	if rerr := s.dir.Remove(); rerr != nil && err == nil {
		err = fmt.Errorf("local store: %w", rerr)
	}
	return err
}
