// Package etcd is the elastic rendezvous over etcd's v3 API, for jobs on
// many nodes: the rendezvous protocol. See docs/rendezvous.md for the
// protocol.
//
// Open is the way in: it turns a rendezvous.Spec (what the flags say)
// into a Session. On the way it plans where the job's store is and
// whether this node hosts it or one of its members (open.go; the hosting
// itself is package jobstore's HostStore), finds the job's token
// (jobauth.JobToken: token_file, GORUN_RDZV_TOKEN, or a file shared
// through the home folder), connects, retrying while the store is not up
// and saying what a probe of each endpoint found (connect.go, over
// jobauth.Diagnose), and opens the job's Rendezvous. The Rendezvous is
// the protocol: rounds (rendezvous.go, join.go, close.go), watching a
// running round (watch.go), the job's outcome (outcome.go: Fail,
// Succeed), the control keys and their mending (control.go), the records
// and their checks (records.go, validate.go), every value sealed with
// the job's jobauth.Guard (sealed.go), the node's lease and its side of
// the presence (lease.go, presence.go), stop requests (stop.go,
// stopjob.go), hang votes and reports (hangvote.go, hang.go), ranks that
// left (left.go), straggler arrivals (arrivals.go) and a lost store's end
// (storegone.go). A store of one member that may serve three nodes or
// more grows to three: the grower and the joiners that host its new
// members (grow.go, growjoin.go) are the protocol's side of it.
//
// What it does not hold: the embedded etcd server, its client port, the
// store's side of presence, its members and their supervision (package
// jobstore), nor the job's token files, TLS, seal and probe (package
// jobauth). Its imports point one way: etcd imports both, jobstore
// imports jobauth, and neither imports etcd.
//
// It lives apart from package rendezvous so that binaries that run only
// single-node or static jobs do not link etcd, whose package
// initialisation alone costs tens of milliseconds at every start.
package etcd
