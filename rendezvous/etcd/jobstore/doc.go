// Package jobstore is the job's store: the embedded etcd server that
// gorun runs for a job's rendezvous (and `gorun store` for anyone's), and
// a node's part in hosting it.
//
// StartServer (server.go) starts one member: its peers over the job's
// mutual TLS (jobauth.PeerTLS), authentication on before its client port
// opens (auth.go), etcd's harmless log lines dropped (etcdlog.go). The
// client port (clientport.go) is gorun's own, in front of etcd's socket:
// it ends the job's TLS (jobauth.ServerTLS), caps the connections that
// have not proved themselves, and holds the nodes' presence connections,
// ending the lease of a node whose process is gone (presence.go: the
// store's side). A store of one member may grow: its first member adds
// learners and promotes them (growserver.go). HostStore (hoststore.go) is
// a node's part: the single member in this process, or one member of a
// store of several, run and restarted as a `gorun-etcd store` process
// (member.go). ListenAddress and SameHost say which addresses of a host
// name are this host's (hostaddr.go); OthersPort refuses a port that
// another user's process holds (portowner.go).
//
// What it does not hold: the rendezvous protocol (rounds, records, the
// node's side of presence, the grower's and the joiners' side of growth:
// package etcd), which it never imports, nor the job's credentials (the
// token, its files, the job's CAs and TLS: package jobauth), which it
// uses.
package jobstore
