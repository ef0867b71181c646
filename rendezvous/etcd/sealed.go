package etcd

import (
	"encoding/json"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Every value the rendezvous writes is sealed, and every value it reads
// is opened, by its jobauth.Guard (r.g): a value that is not the job's is
// refused, and mended (control.go, mend).

// Token is the job's shared secret (package rendezvous).
type Token = rendezvous.Token

// EtcdUser is the embedded etcd's user for jobs.
const EtcdUser = rendezvous.EtcdUser

// put is an OpPut of the record of kind holding data, sealed under key.
func (r *Rendezvous) put(key string, kind recordKind, data any, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpPut(key, r.seal(key, kind, data), opts...)
}

// seal is the value of the record of kind holding data, sealed under
// key.
func (r *Rendezvous) seal(key string, kind recordKind, data any) string {
	return r.g.Seal(key, encodeRecord(kind, data))
}

// is compares key's value with the record of kind holding data, sealed
// under key (records and their seals are deterministic, so fences by
// value work).
func (r *Rendezvous) is(key string, kind recordKind, data any) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(key), "=", r.seal(key, kind, data))
}

// isRound compares the round counter with round t.
func (r *Rendezvous) isRound(t int) clientv3.Cmp { return r.is(r.k.round(), kindRoundCounter, t) }

// putRound sets the round counter to round t.
func (r *Rendezvous) putRound(t int) clientv3.Op { return r.put(r.k.round(), kindRoundCounter, t) }

// isRestarts compares the restart counter with n.
func (r *Rendezvous) isRestarts(n int) clientv3.Cmp { return r.is(r.k.restarts(), kindRestarts, n) }

// putRestarts sets the restart counter to n.
func (r *Rendezvous) putRestarts(n int) clientv3.Op { return r.put(r.k.restarts(), kindRestarts, n) }

// isShape compares the job's shape record with this node's shape.
func (r *Rendezvous) isShape() clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(r.k.shape()), "=", r.sealedShape)
}

// putShape records this node's shape as the job's.
func (r *Rendezvous) putShape() clientv3.Op { return clientv3.OpPut(r.k.shape(), r.sealedShape) }

// sealShape is the job's shape record as this node writes it, sealed
// once: every join compares it.
func (r *Rendezvous) sealShape() string {
	return r.seal(r.k.shape(), kindShape, json.RawMessage(r.shape))
}
