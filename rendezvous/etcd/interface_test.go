package etcd

import "github.com/gorun-dev/gorun/launcher"

// The etcd rendezvous satisfies the agent's interface, and the optional
// ones the agent looks for: the job-wide flight-recorder report, hang
// watch and straggler watch.
var (
	_ launcher.Rendezvous           = (*Rendezvous)(nil)
	_ launcher.FlightRecorderSharer = (*Rendezvous)(nil)
	_ launcher.HangVoter            = (*Rendezvous)(nil)
	_ launcher.ArrivalSharer        = (*Rendezvous)(nil)
	_ launcher.LeftRankSharer       = (*Rendezvous)(nil)
)
