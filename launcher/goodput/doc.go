// Package goodput is the timeline of a run and what it says: the events
// the agent writes (events.jsonl), the workers' progress files and probe
// snapshots, the run folder's attempt layout, and the goodput report
// (ETTR, time lost by cause) that gorun prints at the end and
// `gorun report` prints for any run folder, running or not. The launcher
// writes the timeline through this package's EventLog; this package reads
// and judges it, and knows nothing of the agent.
package goodput
