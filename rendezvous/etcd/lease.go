package etcd

import (
	"context"
	"crypto/tls"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// keptLease is this node's lease, kept alive until its context ends.
type keptLease struct {
	id clientv3.LeaseID
	// done closes when the keep-alive ends: the lease expired (etcd was
	// unreachable for longer than its TTL, or it was revoked) or the
	// context ended. life ends then too.
	done chan struct{}
	life context.Context
	// presence closes when the lease's presence connection is given up
	// (present); nil when none was held.
	presence chan struct{}
}

// keepLease keeps lease id alive until ctx ends. A lease just granted
// needs no keep-alive for a third of its TTL, so the first is sent then
// (as etcd's client schedules every later one): joining a round costs no
// keep-alive stream.
func keepLease(ctx context.Context, cli *clientv3.Client, id clientv3.LeaseID, ttl time.Duration) *keptLease {
	life, end := context.WithCancel(ctx)
	l := &keptLease{id: id, done: make(chan struct{}), life: life}
	go func() {
		defer close(l.done)
		defer end()
		if ctxtime.Sleep(ctx, ttl/3) != nil {
			return
		}
		responses, err := cli.KeepAlive(ctx, id)
		if err != nil {
			return
		}
		for range responses {
		}
	}()
	return l
}

// present holds the lease's presence at the store (presence.go) while
// the keep-alive lasts.
func (l *keptLease) present(endpoints func() []string, tlsCfg *tls.Config, log logrus.FieldLogger) {
	l.presence = make(chan struct{})
	go func() {
		defer close(l.presence)
		holdPresence(l.life, endpoints, tlsCfg, l.id, log)
	}()
}

// ended waits for the keep-alive and the presence to end.
func (l *keptLease) ended() {
	<-l.done
	if l.presence != nil {
		<-l.presence
	}
}

// lost reports whether the keep-alive has ended.
func (l *keptLease) lost() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}
