// Package jobauth is a job's credentials: its token, and what gorun
// derives from it.
//
// The token is the one the user gave (Given: token_file,
// GORUN_RDZV_TOKEN), else one made for the job and shared through the
// home folder (tokenfile.go: JobToken, StoreToken; sharedtoken.go:
// SharedToken). From it come the job's certificate authorities
// (jobca.go); the TLS of a job's store's client port and of its clients
// (jobtls.go: ServerTLS and ClientTLS, under which the store proves it
// holds the token before a client sends anything, and PresenceProto);
// the TLS of its members' peer port (peertls.go); and the seal of every
// value the rendezvous writes (seal.go: Guard). The probe (probe.go) says
// why a store's endpoints do not answer, and whether a store proves that
// it is the job's.
//
// What it does not hold: the store's server (package jobstore) and the
// rendezvous protocol (package etcd). It imports neither: both import it.
package jobauth
