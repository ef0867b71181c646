package etcd

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Every value the rendezvous writes is sealed: followed by an HMAC-SHA256
// over the key and the value, under a key derived from the job's secret.
// A value read back is opened: one whose MAC does not verify (a stranger's
// write, or a write by another job) is refused, logged once with its key,
// and mended (see control.mend). The MAC binds the key, which holds the
// run id and the round, so a sealed value cannot be moved to another key,
// job or round.

// Token is the job's shared secret (package rendezvous).
type Token = rendezvous.Token

// EtcdUser is the embedded etcd's user for jobs.
const EtcdUser = rendezvous.EtcdUser

func recordKey(t Token) []byte { return t.Derive("gorun rendezvous records v1") }

// macSep stands between a sealed value and its MAC (base64url, 43
// characters).
const macSep = "\n#"

// guard seals the values this agent writes and opens, checks and, once
// per key and revision, reports those it reads.
type guard struct {
	mac []byte
	log logrus.FieldLogger

	mu     sync.Mutex
	logged map[string]int64 // key -> mod revision last reported
}

func newGuard(t Token, log logrus.FieldLogger) *guard {
	return &guard{mac: recordKey(t), log: log, logged: map[string]int64{}}
}

func (g *guard) sum(key, payload string) string {
	m := hmac.New(sha256.New, g.mac)
	m.Write([]byte("v1\x00"))
	m.Write([]byte(key))
	m.Write([]byte{0})
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// seal returns payload as written under key.
func (g *guard) seal(key, payload string) string { return payload + macSep + g.sum(key, payload) }

// maxValueLen bounds a value the rendezvous reads: the largest it writes
// (a closed round with every arrival run, a failure reason) is a few KiB.
const maxValueLen = 64 << 10

// open returns the payload of value, read at key (written at revision
// rev), or false after reporting why it is refused.
func (g *guard) open(key string, value []byte, rev int64) ([]byte, bool) {
	return g.openMax(key, value, rev, maxValueLen)
}

// maxReportLen bounds a node's flight-recorder report (etcd's own limit
// on a request is 1.5 MiB).
const maxReportLen = 2 << 20

// openLarge is open for a flight-recorder report.
func (g *guard) openLarge(key string, value []byte, rev int64) ([]byte, bool) {
	return g.openMax(key, value, rev, maxReportLen)
}

func (g *guard) openMax(key string, value []byte, rev int64, limit int) ([]byte, bool) {
	if len(value) > limit {
		g.refuse(key, rev, fmt.Sprintf("%d bytes, more than the %d a record may have", len(value), limit))
		return nil, false
	}
	i := strings.LastIndex(string(value), macSep)
	if i < 0 {
		g.refuse(key, rev, "not sealed by this job (no MAC)")
		return nil, false
	}
	payload, mac := string(value[:i]), string(value[i+len(macSep):])
	if !hmac.Equal([]byte(mac), []byte(g.sum(key, payload))) {
		g.refuse(key, rev, "its MAC does not verify with this job's secret")
		return nil, false
	}
	return []byte(payload), true
}

// refuse logs, once per key and revision, that the value at key is not
// used. The value itself is not logged: it may be large or hostile.
func (g *guard) refuse(key string, rev int64, why string) {
	g.mu.Lock()
	last, seen := g.logged[key]
	if seen && last == rev {
		g.mu.Unlock()
		return
	}
	g.logged[key] = rev
	g.mu.Unlock()
	g.log.Errorf("rendezvous: refused the value of %s (revision %d): %s; a stranger or another job wrote it", key, rev, why)
}

// put is an OpPut of payload sealed under key.
func (r *Rendezvous) put(key, payload string, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpPut(key, r.g.seal(key, payload), opts...)
}

// is compares key's value with payload sealed under key (sealing is
// deterministic, so fences by value work as before).
func (r *Rendezvous) is(key, payload string) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(key), "=", r.g.seal(key, payload))
}
