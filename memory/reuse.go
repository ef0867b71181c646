package memory

import (
	"fmt"
	"os"
	"strings"
	"sync"
)

// Mode is a MULTI_STREAM_MEMORY_REUSE mode: how the tensors of a
// collective on a communication stream are kept from reuse while it runs.
type Mode int

// The modes of docs/sources.md (multi-stream memory reuse); ModeNone protects nothing (benchmarks
// and tests use it to show what the others prevent).
const (
	// ModeRecordStream (0): recordStream on the communication stream;
	// a freed block waits for an event recorded at free time.
	ModeRecordStream Mode = 0
	// ModeEraseRecordStream (1): recordStream, a weak reference per
	// tensor, and the mark erased at Wait for tensors still alive.
	ModeEraseRecordStream Mode = 1
	// ModeAvoidRecordStream (2, the default): no recordStream; the Work
	// holds strong references (its shelf) until the waiting stream is
	// ordered after it, or until the watchdog saw it complete and the
	// caller's next process-group call drained it. Point-to-point falls
	// back to recordStream.
	ModeAvoidRecordStream Mode = 2
	// ModeEraseWithBlock (3): as 1, and a tensor already freed has its
	// pending event erased through its block at Wait.
	ModeEraseWithBlock Mode = 3
	// ModeNone protects nothing.
	ModeNone Mode = -1
)

// ReuseEnv is the variable that selects the mode; DefaultMode applies
// when it is unset.
const (
	ReuseEnv    = "MULTI_STREAM_MEMORY_REUSE"
	DefaultMode = ModeAvoidRecordStream
)

// ParseMode reads a MULTI_STREAM_MEMORY_REUSE value: "" is the default;
// anything but 0, 1, 2 or 3 is an error (torch_npu silently reads a
// non-number as 0; gorun refuses it).
func ParseMode(s string) (Mode, error) {
	switch strings.TrimSpace(s) {
	case "":
		return DefaultMode, nil
	case "0":
		return ModeRecordStream, nil
	case "1":
		return ModeEraseRecordStream, nil
	case "2":
		return ModeAvoidRecordStream, nil
	case "3":
		return ModeEraseWithBlock, nil
	}
	return 0, fmt.Errorf("%s=%q: want 0, 1, 2 or 3 (unset: %d)", ReuseEnv, s, DefaultMode)
}

// envMode is the one cached read of the environment the reuse RFC asks for (docs/sources.md):
// the variable is read once, on first use, and later changes are ignored.
var envMode struct {
	once sync.Once
	mode Mode
	err  error
}

// ModeFromEnv returns the mode MULTI_STREAM_MEMORY_REUSE selects, read
// once per process. Set it before the first process group is created.
func ModeFromEnv() (Mode, error) {
	envMode.once.Do(func() { envMode.mode, envMode.err = ParseMode(os.Getenv(ReuseEnv)) })
	return envMode.mode, envMode.err
}

func (m Mode) String() string {
	if m == ModeNone {
		return "none"
	}
	return fmt.Sprintf("%d", int(m))
}
