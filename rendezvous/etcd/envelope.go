package etcd

import (
	"encoding/json"
	"fmt"

	"github.com/gorun-dev/gorun/rendezvous"
)

// Every record the rendezvous writes has one form, JSON, sealed by the
// job's jobauth.Guard:
//
//	{"v":1,"kind":"outcome","data":{"how":"failed","round":3,...}}
//
// v is the version of the records' forms, kind says what the record
// holds, and data holds it. A record of another version (written by a
// gorun of another release, with this job's secret) is refused, naming
// its version, and stops this node where it meets it among the control
// keys (control.go, foreignErr); a record of another kind than its key
// holds is refused too.

// recordVersion is the version of the records this gorun writes, and
// the only one it reads.
const recordVersion = 1

// recordKind says what a record holds.
type recordKind string

// The kinds of record, one per kind of key (records.go's keys).
const (
	kindToken           recordKind = "job_token"        // ctl/token: the job's token, for a job given none (unsealed)
	kindShape           recordKind = "shape"            // ctl/shape: Shape
	kindRoundCounter    recordKind = "round_counter"    // ctl/round: the round the job is in
	kindRestarts        recordKind = "restarts"         // ctl/restarts: the restarts spent
	kindOutcome         recordKind = "outcome"          // ctl/outcome: outcomeRecord
	kindStop            recordKind = "stop_request"     // ctl/stop: rendezvous.StopRequest
	kindClosed          recordKind = "closed_round"     // ctl/closed/N: RoundRecord
	kindRoundEnd        recordKind = "round_end"        // ctl/end/N: roundEnd
	kindCloser          recordKind = "closer"           // ctl/closer/N: the id of the node closing round N
	kindJoin            recordKind = "join"             // join/N/ID: NodeRecord
	kindNodeRank        recordKind = "node_rank"        // noderank/N/R: the id of the node holding --node-rank R
	kindRanks           recordKind = "ranks"            // rank/N/ID: rankRecord
	kindDone            recordKind = "done"             // done/N/ID: "ok", or "stopped" on a stop request
	kindHangVote        recordKind = "hang_vote"        // hangwatch/N/quiet/G: true, node G is quiet
	kindHangDeclared    recordKind = "hang_declared"    // hangwatch/N/hung: rendezvous.HangDeclared
	kindHangEvidence    recordKind = "hang_evidence"    // hangwatch/N/evidence/G: node G's evidence (the launcher's bytes)
	kindFlightRecorders recordKind = "flight_recorders" // flightrecorders/N/G: node G's flight recorders on a failed round (the launcher's bytes)
	kindLeft            recordKind = "left"             // left/N/R: rendezvous.LeftRank, rank R exited 0 while the others ran
	kindArrivals        recordKind = "arrivals"         // stragglers/N/G: node G's arrivals at collectives (the launcher's bytes)
	kindGrow            recordKind = "store_growth"     // grow/...: the store's growth (invitations, offers, admissions)
)

// envelope is a record's form in the store.
type envelope struct {
	V    int             `json:"v"`
	Kind recordKind      `json:"kind"`
	Data json.RawMessage `json:"data"`
}

// recordVersionError refuses a record of another version.
type recordVersionError struct{ Version int }

func (e *recordVersionError) Error() string {
	return fmt.Sprintf("a record of version %d, written by a gorun of another release; this gorun reads version %d only: run the same gorun on every node of a job", e.Version, recordVersion)
}

// encodeRecord is the record of kind that holds data. Every data the
// rendezvous writes is a type of its own that marshals; one that did not
// would be a bug, and panics.
func encodeRecord(kind recordKind, data any) string {
	d, err := json.Marshal(data)
	if err != nil {
		panic(fmt.Sprintf("rendezvous: a %s record: %v", kind, err))
	}
	b, err := json.Marshal(envelope{V: recordVersion, Kind: kind, Data: d})
	if err != nil {
		panic(fmt.Sprintf("rendezvous: a %s record: %v", kind, err))
	}
	return string(b)
}

// decodeRecord reads payload, a record that should be of kind, into out.
func decodeRecord(payload []byte, kind recordKind, out any) error {
	var e envelope
	if err := json.Unmarshal(payload, &e); err != nil {
		return fmt.Errorf("not a record of gorun's (%v)", err)
	}
	if e.V != recordVersion {
		return &recordVersionError{Version: e.V}
	}
	if e.Kind != kind {
		return fmt.Errorf("a %q record where a %q record belongs", e.Kind, kind)
	}
	if err := json.Unmarshal(e.Data, out); err != nil {
		return fmt.Errorf("its %s data: %v", kind, err)
	}
	return nil
}

// read opens value, read at key and written at revision rev, and decodes
// it as a record of kind into out. A value that is not this job's, or
// not such a record, is refused (logged once, saying why) and read is
// false.
func (r *Rendezvous) read(key string, value []byte, rev int64, kind recordKind, out any) bool {
	payload, ok := r.g.Open(key, value, rev)
	return ok && r.decodeOpened(key, rev, payload, kind, out)
}

// readLarge is read for a record that may be as large as a node's
// flight-recorder evidence.
func (r *Rendezvous) readLarge(key string, value []byte, rev int64, kind recordKind, out any) bool {
	payload, ok := r.g.OpenLarge(key, value, rev)
	return ok && r.decodeOpened(key, rev, payload, kind, out)
}

// decodeOpened decodes the opened payload of key as a record of kind
// into out, refusing it (logged once) when it is not one.
func (r *Rendezvous) decodeOpened(key string, rev int64, payload []byte, kind recordKind, out any) bool {
	if err := decodeRecord(payload, kind, out); err != nil {
		r.g.Refuse(key, rev, err.Error())
		return false
	}
	return true
}

// parseStoredToken reads the job's token from its record at key (a job given
// no token keeps it in the store, unsealed: there is nothing to seal it
// with).
func parseStoredToken(key string, value []byte) (Token, error) {
	var s string
	if err := decodeRecord(value, kindToken, &s); err != nil {
		return nil, fmt.Errorf("rendezvous: %s: %w", key, err)
	}
	return rendezvous.ParseToken(key, []byte(s))
}
