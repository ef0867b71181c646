// Package rendezvous decides which nodes form a job and where each of them
// stands in it: the node (group) rank, the global rank of its first worker,
// the world size and the master address and port that the workers use to
// find each other.
//
// A rendezvous happens in rounds. Every start of the workers, the first and
// every restart, is preceded by a new round, so that a restart can change
// the membership and a new master port avoids sockets still in TIME_WAIT.
//
// This package provides the backends; the launcher declares the small
// interface it needs (launcher.Rendezvous: Next, Watch, Fail, Succeed and
// Close) and uses whichever backend the command line selects; the elastic
// backend over etcd is rendezvous/etcd. Local is the single-node backend: it needs no store
// and picks a free master port for every round, so that two jobs on one
// machine never collide or join each other. Static is torchrun's static
// backend for a fixed set of nodes with a fixed master address and port.
package rendezvous
