// Package storecmd is the contract of `gorun store` with the programs
// that run it: the agent that runs a member of its job's store
// (rendezvous/etcd/jobstore), the launcher's --standalone store for Go workers,
// and the command itself (internal/cmdline/companion). The flag names and
// the line that says a member serves are spelled here once, so that no
// side reads text the other side wrote on its own.
package storecmd

import (
	"fmt"
	"io"
	"strings"
)

// Command is the subcommand of gorun-etcd that serves a store.
const Command = "store"

// Flags of `gorun store` that its callers set.
const (
	Listen           = "listen"              // client address host:port
	PeerListen       = "peer-listen"         // peer address host:port
	DataDir          = "data-dir"            // the store's data
	LogLevel         = "log-level"           // etcd's log level
	Prefix           = "prefix"              // the key prefix the jobs' user may use
	Cert             = "cert"                // TLS certificate of the client port
	Key              = "key"                 // its key
	CACert           = "cacert"              // CA of the clients' certificates
	Cluster          = "cluster"             // the members' peer addresses
	Member           = "member"              // this member's place in Cluster
	Join             = "join"                // a running store's members, to join as a learner
	Name             = "name"                // this member's name in Join
	ReadyTimeout     = "ready-timeout"       // how long a member waits for a majority
	TokenStdin       = "token-stdin"         // the token is standard input's first line
	StopOnStdinClose = "stop-on-stdin-close" // serve until standard input closes
	TokenFile        = "token-file"          // the jobs' token's file
)

// Arg is "--name=value", one flag of the command line.
func Arg(name, value string) string { return "--" + name + "=" + value }

// servingPrefix begins the line a member prints once it serves.
const servingPrefix = "gorun store: member "

// AnnounceMember writes the line that says member who (its place or
// name) serves clients at endpoints, with a note for a person after it:
// the agent that runs the member waits for it (Serving). Nothing else
// the command prints begins so.
func AnnounceMember(w io.Writer, who string, endpoints []string, note string) error {
	_, err := fmt.Fprintf(w, "%s%s serving at %v%s\n", servingPrefix, who, endpoints, note)
	return err
}

// Serving says whether line, from a member's standard output, is its
// AnnounceMember line.
func Serving(line string) bool { return strings.HasPrefix(line, servingPrefix) }
