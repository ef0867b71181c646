package rendezvous

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gorun-dev/gorun/internal/secret"
)

// MinTokenLen is the shortest job token accepted (bytes).
const MinTokenLen = 16

// ErrBadToken: the job token is missing or too short.
var ErrBadToken = errors.New("rendezvous: bad job token")

// Token is a job's shared secret, given by the user (--rdzv-conf
// token_file=, GORUN_RDZV_TOKEN) or made by NewToken: gorun's one secret
// type (package secret), which never prints itself. Derived keys keep
// its uses apart: records, workers (JobSecret) and the embedded
// etcd's password (EtcdPassword).
type Token = secret.Secret

// NewToken returns a random token (32 bytes, hex: 64 characters).
func NewToken() (Token, error) {
	t, err := secret.New()
	if err != nil {
		return nil, fmt.Errorf("rendezvous: make a job token: %w", err)
	}
	return t, nil
}

// ParseToken checks a token read from a file or the environment: white
// space around it is dropped; at least MinTokenLen bytes must remain.
// source names where it came from, for the error (never the token).
func ParseToken(source string, raw []byte) (Token, error) {
	t := strings.TrimSpace(string(raw))
	if len(t) < MinTokenLen {
		return nil, fmt.Errorf("%w: %s holds %d bytes; want at least %d (make one with: head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n')", ErrBadToken, source, len(t), MinTokenLen)
	}
	return Token(t), nil
}

// EtcdUser is the embedded etcd's user for jobs; root is not usable by
// clients (its password is random and thrown away).
const EtcdUser = "gorun"
