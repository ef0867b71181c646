package launcher

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"github.com/gorun-dev/gorun/rendezvous"
)

// LocalStore is the key-value store of a single-node job (--standalone):
// an embedded etcd that runs in a companion process, `gorun-etcd store`,
// on a free loopback port. Workers find it in GORUN_STORE_ENDPOINTS. It
// starts beside the workers (nothing waits for it to be ready: a client
// retries its connection) and is killed once they are done. The data
// directory is this process's, removed by Stop; the store keeps nothing
// that outlives the job.
type LocalStore struct {
	endpoint string
	dir      string
	proc     *process
}

// StartLocalStore starts `binary store` on a free port of 127.0.0.1.
// Its errors go to stderr; it dies with this process.
func StartLocalStore(binary string, stderr *os.File) (*LocalStore, error) {
	port, err := rendezvous.FreePort(rendezvous.DefaultLocalAddr)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gorun-store-")
	if err != nil {
		return nil, fmt.Errorf("local store: data directory: %w", err)
	}
	s := &LocalStore{endpoint: rendezvous.DefaultLocalAddr + ":" + strconv.Itoa(port), dir: dir}
	argv := []string{binary, "store", "--listen", s.endpoint, "--data-dir", dir, "--log-level", "error"}
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("local store: %w", err)
	}
	defer devnull.Close()
	// The lowest CPU priority: on a busy node the workers' own start-up
	// comes first, and only Go workers that use the store wait for it.
	proc, started := startProcess(argv, os.Environ(), devnull, stderr, make(chan *process, 1), storeNice)
	if err := <-started; err != nil {
		os.RemoveAll(dir)
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
// shutdown), waits for it and removes its data directory.
func (s *LocalStore) Stop() error {
	err := s.proc.signalGroup(syscall.SIGKILL)
	<-s.proc.done
	if rerr := os.RemoveAll(s.dir); rerr != nil && err == nil {
		err = fmt.Errorf("local store: %w", rerr)
	}
	return err
}
