package launcher

import (
	"strings"
	"syscall"

	"github.com/gorun-dev/gorun/internal/workerenv"
)

// SignalName returns the conventional name of sig, such as "SIGTERM", or
// "signal N" for one without a name (workerenv's table).
func SignalName(sig syscall.Signal) string { return workerenv.SignalName(sig) }

// signalList spells sigs as torchrun's --signals-to-handle does:
// "SIGTERM,SIGINT".
func signalList(sigs []syscall.Signal) string {
	names := make([]string, len(sigs))
	for i, s := range sigs {
		names[i] = SignalName(s)
	}
	return strings.Join(names, ",")
}
