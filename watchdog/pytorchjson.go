package watchdog

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// UnmarshalJSON reads a group's status as gorun writes it (numbers) and
// as PyTorch 2.x's _dump_fr_trace_json does (decimal strings: "16").
func (s *PGStatus) UnmarshalJSON(b []byte) error {
	var raw struct {
		LastEnqueued  json.RawMessage `json:"last_enqueued_collective"`
		LastStarted   json.RawMessage `json:"last_started_collective"`
		LastCompleted json.RawMessage `json:"last_completed_collective"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		to   *int64
	}{
		{"last_enqueued_collective", raw.LastEnqueued, &s.LastEnqueued},
		{"last_started_collective", raw.LastStarted, &s.LastStarted},
		{"last_completed_collective", raw.LastCompleted, &s.LastCompleted},
	} {
		n, err := counter(f.raw)
		if err != nil {
			return fmt.Errorf("pg_status %s: %w", f.name, err)
		}
		*f.to = n
	}
	return nil
}

// counter reads a sequence number written as a number or a decimal
// string; a missing one is -1 (none).
func counter(raw json.RawMessage) (int64, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return -1, nil
	}
	var n int64
	if err := json.Unmarshal(raw, &n); err == nil {
		return n, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return 0, fmt.Errorf("%s: want a number", raw)
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%q: want a number", s)
	}
	return n, nil
}

// tracksStart reports whether d's backend records when a collective
// starts (NCCL's and gorun's do); gloo's leaves every entry "scheduled"
// until it retires, so there an enqueued entry is one the rank waits in.
func tracksStart(d Dump) bool {
	for _, st := range d.PGStatus {
		if st.LastStarted >= 0 {
			return true
		}
	}
	for _, e := range d.Entries {
		if e.State != StateScheduled {
			return true
		}
	}
	return false
}
