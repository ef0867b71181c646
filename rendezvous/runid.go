package rendezvous

import (
	"errors"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/gorun-dev/gorun/internal/setting"
)

// ErrInvalidRunID: a run id (--rdzv-id) cannot name a folder or a store
// key. Run ids name log folders (<log_dir>/<run_id>_<random>) and store
// keys (<prefix>/<run_id>/...), so one with a '/' could move them
// (`../../x`).
var ErrInvalidRunID = errors.New("invalid run id")

// MaxRunIDLen bounds a run id (bytes).
const MaxRunIDLen = 128

// ValidateRunID reports whether id can be a run id: 1 to MaxRunIDLen
// bytes of UTF-8 text without '/' or control characters. What torchrun
// takes as a run id (Slurm job ids, Kubernetes names, "job:42", "my job",
// torchrun's default "none") is one.
func ValidateRunID(id string) error {
	if id == "" || len(id) > MaxRunIDLen {
		return setting.Errorf("%w: %s=%q: want 1 to %d bytes", ErrInvalidRunID, setting.Name("RunID"), id, MaxRunIDLen)
	}
	if !utf8.ValidString(id) {
		return setting.Errorf("%w: %s=%q: not UTF-8 text", ErrInvalidRunID, setting.Name("RunID"), id)
	}
	if i := strings.IndexFunc(id, func(r rune) bool { return r == '/' || unicode.IsControl(r) }); i >= 0 {
		r, _ := utf8.DecodeRuneInString(id[i:])
		return setting.Errorf("%w: %s=%q: character %q at %d; a run id names a folder and store keys: anything but '/' and control characters", ErrInvalidRunID, setting.Name("RunID"), id, r, i)
	}
	return nil
}
