package jobauth

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"hash"
	"io"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Every value the rendezvous writes is sealed: followed by an HMAC-SHA256
// over the key and the value, under a key derived from the job's secret.
// A value read back is opened: one whose MAC does not verify (a stranger's
// write, or a write by another job) is refused, logged once with its key,
// and mended (package etcd's control.go, mend). The MAC binds the key,
// which holds the run id and the round, so a sealed value cannot be moved
// to another key, job or round.

// Token is the job's shared secret (package rendezvous's type).
type Token = rendezvous.Token

func recordKey(t Token) []byte { return t.Derive("gorun rendezvous records v1") }

// macSep stands between a sealed value and its MAC (base64url, 43
// characters).
const macSep = "\n#"

// Guard seals the values this agent writes and opens, checks and, once
// per key and revision, reports those it reads.
type Guard struct {
	mac []byte
	log logrus.FieldLogger
	// macs holds HMACs keyed with mac, reset: keying one hashes two
	// blocks and allocates, and an agent seals and opens every record.
	macs sync.Pool

	mu     sync.Mutex
	logged map[string]int64 // key -> mod revision last reported
}

// NewGuard is the Guard of the job whose token is t; it reports the
// values it refuses on log.
func NewGuard(t Token, log logrus.FieldLogger) *Guard {
	g := &Guard{mac: recordKey(t), log: log, logged: map[string]int64{}}
	g.macs.New = func() any { return hmac.New(sha256.New, g.mac) }
	return g
}

func (g *Guard) sum(key, payload string) string {
	m := g.macs.Get().(hash.Hash)
	defer func() { m.Reset(); g.macs.Put(m) }()
	io.WriteString(m, "v1\x00")
	io.WriteString(m, key)
	m.Write([]byte{0})
	io.WriteString(m, payload)
	var sum [sha256.Size]byte
	return base64.RawURLEncoding.EncodeToString(m.Sum(sum[:0]))
}

// Seal returns payload as written under key.
func (g *Guard) Seal(key, payload string) string { return payload + macSep + g.sum(key, payload) }

// maxValueLen bounds a value the rendezvous reads: the largest it writes
// (a closed round with every arrival run, a failure reason) is a few KiB.
const maxValueLen = 64 << 10

// Open returns the payload of value, read at key (written at revision
// rev), or false after reporting why it is refused.
func (g *Guard) Open(key string, value []byte, rev int64) ([]byte, bool) {
	return g.openMax(key, value, rev, maxValueLen)
}

// maxReportLen bounds a node's flight-recorder report (etcd's own limit
// on a request is 1.5 MiB).
const maxReportLen = 2 << 20

// OpenLarge is Open for a flight-recorder report, which may be larger.
func (g *Guard) OpenLarge(key string, value []byte, rev int64) ([]byte, bool) {
	return g.openMax(key, value, rev, maxReportLen)
}

func (g *Guard) openMax(key string, value []byte, rev int64, limit int) ([]byte, bool) {
	if len(value) > limit {
		g.Refuse(key, rev, fmt.Sprintf("%d bytes, more than the %d a record may have", len(value), limit))
		return nil, false
	}
	i := strings.LastIndex(string(value), macSep)
	if i < 0 {
		g.Refuse(key, rev, "not sealed by this job (no MAC): a stranger or another job wrote it")
		return nil, false
	}
	payload, mac := string(value[:i]), string(value[i+len(macSep):])
	if !hmac.Equal([]byte(mac), []byte(g.sum(key, payload))) {
		g.Refuse(key, rev, "its MAC does not verify with this job's secret: a stranger or another job wrote it")
		return nil, false
	}
	return []byte(payload), true
}

// Refuse logs, once per key and revision (rev), that the value at key is
// not used, and why. The value itself is not logged: it may be large or
// hostile.
func (g *Guard) Refuse(key string, rev int64, why string) {
	g.mu.Lock()
	last, seen := g.logged[key]
	if seen && last == rev {
		g.mu.Unlock()
		return
	}
	g.logged[key] = rev
	g.mu.Unlock()
	g.log.Errorf("rendezvous: refused the value of %s (revision %d): %s", key, rev, why)
}
