package rendezvous

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// MinTokenLen is the shortest job token accepted (bytes).
const MinTokenLen = 16

// ErrBadToken: the job token is missing or too short.
var ErrBadToken = errors.New("rendezvous: bad job token")

// Token is a job's shared secret, given by the user (--rdzv-conf
// token_file=, GORUN_RDZV_TOKEN) or made by NewToken. Derived keys keep
// its uses apart: records, workers and the embedded etcd's password.
type Token []byte

// NewToken returns a random token (32 bytes, hex: 64 characters).
func NewToken() (Token, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("rendezvous: make a job token: %w", err)
	}
	return Token(hex.EncodeToString(b)), nil
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

// String returns "[job token]" (nothing for an empty token): a token is
// never printed, whatever prints it (%s, %v, %q, %x, a logrus field).
func (t Token) String() string {
	if len(t) == 0 {
		return ""
	}
	return "[job token]"
}

// Format prints String whatever the verb.
func (t Token) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, t.String()) }

// MarshalText returns String, so that JSON and logrus fields show it.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }

// Derive returns the HMAC-SHA256 of label under t: a key for one use.
func (t Token) Derive(label string) []byte {
	m := hmac.New(sha256.New, t)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// WorkerSecret is the secret workers of run runID get in
// GORUN_JOB_SECRET (64 hex characters): the worker store and the mesh
// require it.
func (t Token) WorkerSecret(runID string) string {
	return hex.EncodeToString(t.Derive("gorun worker secret v1\x00" + runID))
}

// EtcdPassword is the password of the embedded etcd's job user
// (EtcdUser), the same on every node that holds the token.
func (t Token) EtcdPassword() string { return hex.EncodeToString(t.Derive("gorun etcd password v1")) }

// EtcdUser is the embedded etcd's user for jobs; root is not usable by
// clients (its password is random and thrown away).
const EtcdUser = "gorun"
