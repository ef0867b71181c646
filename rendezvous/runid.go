package rendezvous

import (
	"errors"
	"fmt"
)

// ErrInvalidRunID: a run id (--rdzv-id) is not a plain name. Run ids name
// log folders and store keys, so one that is not a plain name could move
// them (`../../x`).
var ErrInvalidRunID = errors.New("invalid run id")

// MaxRunIDLen bounds a run id.
const MaxRunIDLen = 128

// ValidateRunID reports whether id is a plain name: 1 to MaxRunIDLen
// characters, letters, digits, '.', '_' and '-', not starting with '.' or
// '-'. Slurm job ids, Kubernetes names and torchrun's default "none" are
// plain names.
func ValidateRunID(id string) error {
	if id == "" || len(id) > MaxRunIDLen {
		return fmt.Errorf("%w: --rdzv-id=%q: want 1 to %d characters", ErrInvalidRunID, id, MaxRunIDLen)
	}
	if id[0] == '.' || id[0] == '-' {
		return fmt.Errorf("%w: --rdzv-id=%q: want a name that starts with a letter, a digit or '_'", ErrInvalidRunID, id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		default:
			return fmt.Errorf("%w: --rdzv-id=%q: character %q at %d; allowed are letters, digits, '.', '_' and '-'", ErrInvalidRunID, id, c, i)
		}
	}
	return nil
}
