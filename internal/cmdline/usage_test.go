package cmdline

import (
	"errors"
	"fmt"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/rendezvous"
)

// TestUsageErrorExitsTwo: bad input exits 2 however deep it is wrapped
// (the agent wraps a rendezvous's), whether the command line or a
// rendezvous backend said so, keeps its message and its cause, and other
// errors are not taken for it.
func TestUsageErrorExitsTwo(t *testing.T) {
	t.Parallel()
	cause := errors.New("--nnodes=3:2: want MIN <= MAX")
	for _, tt := range []struct {
		name  string
		err   error
		usage bool
		msg   string
	}{
		{"Usage", Usage(cause), true, cause.Error()},
		{"Usagef", Usagef("--format=%q: want text or json", "xml"), true, `--format="xml": want text or json`},
		{"Usagef wraps", Usagef("gorun store: %w", cause), true, "gorun store: " + cause.Error()},
		{"wrapped by the agent", fmt.Errorf("rendezvous: %w", Usage(cause)), true, "rendezvous: " + cause.Error()},
		{"a backend's bad input", rendezvous.BadInput(cause), true, cause.Error()},
		{"a backend's bad input, wrapped", fmt.Errorf("rendezvous: %w", rendezvous.BadInput(cause)), true, "rendezvous: " + cause.Error()},
		{"shape mismatch", fmt.Errorf("%w job1: %w", rendezvous.ErrShapeMismatch, cause), true, rendezvous.ErrShapeMismatch.Error() + " job1: " + cause.Error()},
		{"invalid node", fmt.Errorf("%w: %w", rendezvous.ErrInvalidNode, cause), true, rendezvous.ErrInvalidNode.Error() + ": " + cause.Error()},
		{"not usage", fmt.Errorf("etcd unreachable: %w", cause), false, "etcd unreachable: " + cause.Error()},
		{"an exit of its own", cli.Exit(cause.Error(), 3), false, cause.Error()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := isUsage(tt.err); got != tt.usage {
				t.Errorf("isUsage = %v; want %v", got, tt.usage)
			}
			exit := ExitError(tt.err, 1)
			var ec cli.ExitCoder
			if got := errors.As(exit, &ec) && ec.ExitCode() == 2; got != tt.usage {
				t.Errorf("exits 2: %v; want %v", got, tt.usage)
			}
			if own, ok := tt.err.(cli.ExitCoder); ok && !tt.usage && ec.ExitCode() != own.ExitCode() {
				t.Errorf("exit code %d; want the error's own %d", ec.ExitCode(), own.ExitCode())
			}
			if tt.err.Error() != tt.msg || exit.Error() != tt.msg {
				t.Errorf("message %q, exit's %q; want %q", tt.err.Error(), exit.Error(), tt.msg)
			}
			if _, own := tt.err.(cli.ExitCoder); tt.name != "Usagef" && !(own && !tt.usage) && !errors.Is(tt.err, cause) {
				t.Errorf("%v does not wrap its cause", tt.err)
			}
		})
	}
	if Usage(nil) != nil {
		t.Error("Usage(nil) is not nil")
	}
}
