// Package etcd is the elastic rendezvous over etcd's v3 API, for jobs on
// many nodes, and an embedded etcd server for machines that have none.
// See docs/rendezvous.md for the protocol.
//
// It lives apart from package rendezvous so that binaries that run only
// single-node or static jobs do not link etcd, whose package
// initialisation alone costs tens of milliseconds at every start.
package etcd
