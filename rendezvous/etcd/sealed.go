package etcd

import (
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

// put is an OpPut of payload sealed under key.
func (r *Rendezvous) put(key, payload string, opts ...clientv3.OpOption) clientv3.Op {
	return clientv3.OpPut(key, r.g.Seal(key, payload), opts...)
}

// is compares key's value with payload sealed under key (sealing is
// deterministic, so fences by value work as before).
func (r *Rendezvous) is(key, payload string) clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(key), "=", r.g.Seal(key, payload))
}
