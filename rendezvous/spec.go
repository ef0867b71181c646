package rendezvous

import (
	"errors"
	"github.com/gorun-dev/gorun/internal/setting"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Spec is an elastic rendezvous as a launch's flags describe it
// (--rdzv-backend, --rdzv-endpoint, --rdzv-conf, --nnodes, ...): what a
// backend opens (rendezvous/etcd.Open).
type Spec struct {
	// Backend is --rdzv-backend: c10d or embedded (the store hosted by a
	// node of the job), etcd or etcd-v2 (an external etcd).
	Backend string
	// Endpoint is --rdzv-endpoint: host[:port][,...].
	Endpoint string
	// Conf is --rdzv-conf, key by key.
	Conf     map[string]string
	RunID    string
	MinNodes int
	MaxNodes int
	// NodeRank is --node-rank when set, else -1.
	NodeRank     int
	NprocPerNode int
	Role         string
	MaxRestarts  int
	// Sizes, when set, are the node counts at which the --plan layout is
	// valid: rounds run at the largest the joined nodes allow, the other
	// nodes wait as hot spares.
	Sizes []int
	// LocalAddr is --local-addr, or "" for the host's name.
	LocalAddr string
	// StoreHosts are hosts for the embedded store's members, from the
	// scheduler (the first three of a Slurm job's), when --rdzv-conf
	// store_hosts gives none.
	StoreHosts []string
	// Log receives progress and warnings.
	Log logrus.FieldLogger
	// ShowSetting names a setting as the users of the other nodes know
	// it (the command line's flag), in what this node tells them through
	// the store (why it cannot join); nil: the setting's own name.
	ShowSetting func(setting.Name) string
}

// ErrInvalidConfig: a setting is out of range or cannot be used (a flag,
// a --rdzv-conf key, a token file); retrying cannot help. Every error a
// backend returns for bad input in a Spec matches it with errors.Is; a
// node that does not fit the job it joins says ErrShapeMismatch or
// ErrInvalidNode instead.
var ErrInvalidConfig = errors.New("rendezvous: invalid configuration")

// InputError is bad input described in Err's own words: it matches
// ErrInvalidConfig, and its text is Err's.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }

// Unwrap is Err and ErrInvalidConfig.
func (e *InputError) Unwrap() []error { return []error{e.Err, ErrInvalidConfig} }

// BadInput marks err as bad input (an *InputError); nil stays nil.
func BadInput(err error) error {
	if err == nil {
		return nil
	}
	return &InputError{Err: err}
}

// The launcher's secrets in its environment, which its workers never get:
// TokenEnv holds the job token itself, for those who keep it out of
// files; TokenFileEnv names the file that holds it (--rdzv-conf
// token_file); PasswordEnv is an external etcd user's password
// (--rdzv-conf password).
const (
	TokenEnv     = "GORUN_RDZV_TOKEN"
	TokenFileEnv = "GORUN_RDZV_TOKEN_FILE"
	PasswordEnv  = "GORUN_RDZV_PASSWORD"
)

// ParseSeconds parses a duration: a Go duration ("30s", "1m30s") or a
// plain number of seconds ("30", "0.5"), as
// TORCH_ELASTIC_SHUTDOWN_TIMEOUT and torchrun's --rdzv-conf give them.
// Its error says what is allowed; the caller names the setting.
func ParseSeconds(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		if f < 0 {
			return 0, errors.New("want 0 or more")
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		return 0, errors.New("want a duration such as 30s or 1m, or a number of seconds")
	case d < 0:
		return 0, errors.New("want 0 or more")
	}
	return d, nil
}
