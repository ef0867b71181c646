package comm

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gorun-dev/gorun/internal/secret"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// JobSecretEnv names the job's secret, which gorun gives every worker:
// 64 hexadecimal digits (32 random bytes), the same on every rank. The
// worker store and the CPU backend's mesh admit only connections that
// prove they know it (docs/comm.md); it never crosses the wire.
const JobSecretEnv = workerenv.JobSecret

// SecretLen is the length of a job secret in bytes (secret.Bytes).
const SecretLen = secret.Bytes

// DefaultHandshakeTimeout bounds the authentication of one connection
// to the store or to the mesh: a connection that says nothing does not
// hold its slot longer.
const DefaultHandshakeTimeout = 10 * time.Second

// Secret is a job's shared secret, 64 hexadecimal digits of 32 random
// bytes (JobSecretEnv): gorun's one secret type (package
// internal/secret), which never prints itself. The zero Secret is none:
// the store and the mesh then run the same handshake with an empty key,
// which any program can compute, so they accept any connection.
type Secret = secret.Secret

// ParseSecret reads a secret written as 64 hexadecimal digits. Its errors
// never quote s.
func ParseSecret(s string) (Secret, error) {
	if len(s) != 2*SecretLen {
		return nil, fmt.Errorf("comm: %s: want %d hexadecimal digits (%d random bytes); it has %d characters", JobSecretEnv, 2*SecretLen, SecretLen, len(s))
	}
	if _, err := hex.DecodeString(s); err != nil {
		return nil, fmt.Errorf("comm: %s: want %d hexadecimal digits (%d random bytes); it has other characters", JobSecretEnv, 2*SecretLen, SecretLen)
	}
	return Secret(s), nil
}

// NewSecretHex makes a job secret in the form JobSecretEnv wants: 64
// hexadecimal digits of 32 random bytes.
func NewSecretHex() (string, error) {
	s, err := secret.New()
	if err != nil {
		return "", fmt.Errorf("comm: job secret: %w", err)
	}
	return s.Reveal(), nil
}

// SecretFromEnv reads JobSecretEnv: the zero Secret when it is unset or
// empty, an error (naming the variable, not its value) when malformed.
func SecretFromEnv() (Secret, error) {
	v := os.Getenv(JobSecretEnv)
	if v == "" {
		return nil, nil
	}
	return ParseSecret(v)
}

// secretMAC is HMAC-SHA256, under the key whose hex s is, of label and
// parts, each part prefixed with its length so that no two lists give
// the same input.
func secretMAC(s Secret, label string, parts ...[]byte) []byte {
	key, _ := hex.DecodeString(s.Reveal()) // checked by ParseSecret; none: empty
	h := hmac.New(sha256.New, key)
	var n [4]byte
	for _, p := range append([][]byte{[]byte(label)}, parts...) {
		binary.LittleEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// verifyMAC reports in constant time whether got is the MAC of label and
// parts under s.
func verifyMAC(s Secret, got []byte, label string, parts ...[]byte) bool {
	return hmac.Equal(got, secretMAC(s, label, parts...))
}

// hmacEqual compares two MACs in constant time.
func hmacEqual(a, b []byte) bool { return hmac.Equal(a, b) }

// nonceLen is the length of a handshake's random challenge.
const nonceLen = 32

func newNonce() ([]byte, error) {
	b := make([]byte, nonceLen)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return nil, fmt.Errorf("comm: random nonce: %w", err)
	}
	return b, nil
}

// u32 is n as 4 little-endian bytes, for MAC inputs.
func u32(n int) []byte {
	return binary.LittleEndian.AppendUint32(nil, uint32(n))
}

// MAC labels: each message of each protocol has its own, so that no
// answer of one is valid as another.
const (
	labelStoreClient = "gorun store client v1"
	labelStoreServer = "gorun store server v1"
	labelMeshDial    = "gorun mesh dial v1"
	labelMeshAccept  = "gorun mesh accept v1"
	labelShmName     = "gorun shm name v1"
)

// warnNoSecret is the warning of a worker without JobSecretEnv.
const warnNoSecret = "comm: warning: " + JobSecretEnv + " is not set: the worker store and the mesh accept any connection " +
	"(gorun sets it; another launcher can set it to the same 64 hexadecimal digits on every rank)\n"
