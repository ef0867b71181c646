// Package secret is gorun's one type of secret: the job token a user
// gives the rendezvous, the job secret the workers' store and mesh
// authenticate with, and the keys derived from them. A Secret never
// prints itself: fmt's verbs, JSON, text marshalling and logrus fields
// all give Placeholder; Reveal returns the value for the one place that
// needs it (a child's environment, a key derivation).
package secret

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
)

// Placeholder stands for a secret wherever it is shown.
const Placeholder = "<secret>"

// Secret is a secret value: its text (a token, or 64 hexadecimal digits
// for a secret gorun made). The zero Secret is none.
type Secret []byte

// Bytes is the length of a secret New makes, before hex encoding (64
// hexadecimal digits after).
const Bytes = 32

// New returns a fresh secret: 32 random bytes, hex-encoded (64
// characters).
func New() (Secret, error) {
	b := make([]byte, Bytes)
	if _, err := io.ReadFull(rand.Reader, b); err != nil {
		return nil, fmt.Errorf("make a secret: %w", err)
	}
	return Secret(hex.EncodeToString(b)), nil
}

// IsSet reports whether s is a secret (not the zero one).
func (s Secret) IsSet() bool { return len(s) > 0 }

// Reveal returns the secret itself.
func (s Secret) Reveal() string { return string(s) }

// String returns Placeholder (nothing for no secret).
func (s Secret) String() string {
	if !s.IsSet() {
		return ""
	}
	return Placeholder
}

// Format prints String whatever the verb (%s, %v, %+v, %#v, %q, %x).
func (s Secret) Format(f fmt.State, _ rune) { _, _ = io.WriteString(f, s.String()) }

// GoString hides the secret from %#v.
func (s Secret) GoString() string { return s.String() }

// MarshalText returns String, so that JSON, YAML and logrus fields show
// the placeholder.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Derive returns the HMAC-SHA256 of label under s: a key for one use,
// kept apart from the others by its label.
func (s Secret) Derive(label string) []byte {
	m := hmac.New(sha256.New, s)
	m.Write([]byte(label))
	return m.Sum(nil)
}

// JobSecret is the job secret that the workers of run runID get from
// a job token (GORUN_JOB_SECRET, 64 hexadecimal digits), the same on
// every node that holds the token.
func (s Secret) JobSecret(runID string) Secret {
	return Secret(hex.EncodeToString(s.Derive("gorun worker secret v1\x00" + runID)))
}

// EtcdPassword is the embedded etcd's job user's password derived from a
// job token, the same on every node that holds the token.
func (s Secret) EtcdPassword() string { return hex.EncodeToString(s.Derive("gorun etcd password v1")) }
