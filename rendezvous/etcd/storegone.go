package etcd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"
)

// A store of one member that another agent of the job hosts (the
// embedded store of a plain c10d line) dies with that agent, and nothing
// restarts it. Its port then refuses connections (the host is up, the
// process is gone): refused for storeGoneAfter, this node takes the
// store for gone and every call of the rendezvous that waits for etcd
// ends at once, naming the host, instead of retrying for connect_timeout
// (60 s). A store that does not answer at all (a host down, a partition)
// is waited for as before: it may come back.
const (
	storeGoneAfter  = 2 * time.Second
	storeProbeEvery = 250 * time.Millisecond
)

// errStoreGone is the rendezvous's error once the store is gone.
var errStoreGone = errors.New("rendezvous: the job's store is gone")

// watchStoreHost probes ep, the store's only member, hosted by another
// agent, until the rendezvous closes (r.life); it marks the store gone
// when ep refuses connections for storeGoneAfter.
func (r *Rendezvous) watchStoreHost(ep string) {
	var refusedSince time.Time
	tick := time.NewTicker(storeProbeEvery)
	defer tick.Stop()
	for {
		select {
		case <-r.life.Done():
			return
		case <-tick.C:
		}
		if r.grown.Load() {
			return // the store has more members now: it outlives its first
		}
		c, err := (&net.Dialer{Timeout: time.Second}).DialContext(r.life, "tcp", ep)
		switch {
		case err == nil:
			c.Close()
			refusedSince = time.Time{}
		case errors.Is(err, syscall.ECONNREFUSED):
			if refusedSince.IsZero() {
				refusedSince = time.Now()
			}
			if time.Since(refusedSince) >= storeGoneAfter {
				r.markGone(fmt.Errorf("%w: its only member, at %s, hosted by the agent on that host, refuses connections (that agent was killed or exited): a store of one member dies with its host (a job that may have 3 nodes or more grows its store to three members once 3 take part, and then outlives that agent)", errStoreGone, ep))
				return
			}
		}
	}
}

// markGone records why the store is gone and ends storeAlive.
func (r *Rendezvous) markGone(err error) {
	r.goneWhy.Store(&err)
	r.storeGone()
	r.cfg.Log.Debugf("%v", err) // the round's end and the agent's exit say it
}

// goneErr is the reason the store is gone, nil while it is not.
func (r *Rendezvous) goneErr() error {
	if p := r.goneWhy.Load(); p != nil {
		return *p
	}
	return nil
}

// whileStore returns ctx that also ends when the store is gone.
func (r *Rendezvous) whileStore(ctx context.Context) (context.Context, context.CancelFunc) {
	sctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.storeAlive, cancel)
	return sctx, func() {
		stop()
		cancel()
	}
}
