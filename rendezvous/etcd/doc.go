// Package etcd is the elastic rendezvous over etcd's v3 API, for jobs on
// many nodes, and an embedded etcd server for machines that have none.
// See docs/rendezvous.md for the protocol.
//
// Open is the way in: it turns a rendezvous.Spec (what the flags say)
// into a Session. On the way it hosts the job's embedded store when this
// node is its host (StartServer in this process, or one member of a
// store of several run as a supervised `gorun-etcd store` process:
// hoststore.go, member.go), finds the job's token (token_file,
// GORUN_RDZV_TOKEN, or a file shared through the home folder:
// tokenfile.go, sharedtoken.go), connects, retrying while the store is
// not up and saying what a probe of each endpoint found (connect.go,
// probe.go), and opens the job's Rendezvous (rendezvous.go, join.go,
// watch.go, lease.go). The server side lives in server.go, clientport.go
// (the authenticated client port and the nodes' presence), peertls.go
// and jobtls.go.
//
// It lives apart from package rendezvous so that binaries that run only
// single-node or static jobs do not link etcd, whose package
// initialisation alone costs tens of milliseconds at every start.
package etcd
