package launcher

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// Names of the variables that carry the job secret.
const (
	// EnvJobSecret gives every worker the job's secret, with which the
	// worker store and the mesh authenticate their peers.
	EnvJobSecret = workerenv.JobSecret
	// EnvStorePassword gives the --standalone local store the password of
	// its one user, rendezvous.EtcdUser: the job's secret, which the
	// workers get as GORUN_STORE_PASSWORD to log in.
	EnvStorePassword = workerenv.StorePassword
	// SecretPlaceholder stands for the secret wherever it is shown: a
	// dry run's environment, a formatted Secret.
	SecretPlaceholder = "<secret>"
)

// secretBytes is the secret's length before hex encoding.
const secretBytes = 32

// Secret is a job secret: 64 hex digits. It never prints itself: fmt's
// verbs, JSON and text marshalling all give SecretPlaceholder, so a
// Config or a value logged by mistake does not leak it. Reveal returns
// the value.
type Secret string

// randomDevice is the kernel's random number generator: the one
// crypto/rand reads (through getrandom(2)) on Linux. Reading the device
// keeps crypto/rand, which brings in 34 packages (the FIPS module, AES,
// SHA-2/3, math/big), out of gorun: +360 KB and +0.1 ms to every launch,
// measured.
const randomDevice = "/dev/urandom"

// NewSecret returns a fresh secret: 32 bytes of the kernel's random
// number generator, hex-encoded (64 characters).
func NewSecret() (Secret, error) {
	f, err := os.Open(randomDevice)
	if err != nil {
		return "", fmt.Errorf("job secret: %w", err)
	}
	defer f.Close()
	return newSecret(f)
}

func newSecret(r io.Reader) (Secret, error) {
	b := make([]byte, secretBytes)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", fmt.Errorf("job secret: read random bytes: %w", err)
	}
	return Secret(hex.EncodeToString(b)), nil
}

// Reveal returns the secret itself, for the environment of the processes
// that need it.
func (s Secret) Reveal() string { return string(s) }

// String returns SecretPlaceholder, or "" for an empty secret.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return SecretPlaceholder
}

// Format prints String whatever the verb (%s, %v, %+v, %#v, %q, %x).
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// MarshalText returns String, so that JSON, YAML and logrus fields show
// the placeholder.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// secretWarnings tells the user that a GORUN_JOB_SECRET of gorun's own
// environment is not passed on: a secret is the job's, not the user's.
func secretWarnings(cfg *Config) []string {
	if _, set := lookupEnv(cfg.Environ, EnvJobSecret); set {
		return []string{EnvJobSecret + " in gorun's environment is ignored: every job gets its own secret (the rendezvous's, or one gorun makes)"}
	}
	return nil
}
