package workerenv

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
)

// The signal values of the contract: StopSignal holds one stop signal's
// name, IgnoredSignals a list of names, each without "SIG" (TERM, USR1).
// The agent writes them with FormatStopSignal and FormatSignalList, the
// workers read them with ParseStopSignal and ParseSignalList: one table,
// so that a name one side writes the other reads.

// namedSignal is one signal and its name without "SIG".
type namedSignal struct {
	name string
	sig  syscall.Signal
	// stop: a worker can be asked to stop with it (it can be caught and
	// means no fault).
	stop bool
}

// signalTable lists the signals gorun names, stop signals marked.
func signalTable() []namedSignal {
	return []namedSignal{
		{"HUP", syscall.SIGHUP, true}, {"INT", syscall.SIGINT, true}, {"QUIT", syscall.SIGQUIT, true},
		{"TERM", syscall.SIGTERM, true}, {"USR1", syscall.SIGUSR1, true}, {"USR2", syscall.SIGUSR2, true},
		{"ALRM", syscall.SIGALRM, true}, {"XCPU", syscall.SIGXCPU, true}, {"PWR", syscall.SIGPWR, true},
		{"ABRT", syscall.SIGABRT, false}, {"KILL", syscall.SIGKILL, false}, {"SEGV", syscall.SIGSEGV, false},
		{"PIPE", syscall.SIGPIPE, false}, {"BUS", syscall.SIGBUS, false}, {"FPE", syscall.SIGFPE, false},
		{"ILL", syscall.SIGILL, false}, {"TRAP", syscall.SIGTRAP, false}, {"XFSZ", syscall.SIGXFSZ, false},
		{"SYS", syscall.SIGSYS, false}, {"CONT", syscall.SIGCONT, false}, {"STOP", syscall.SIGSTOP, false},
		{"TSTP", syscall.SIGTSTP, false},
	}
}

// Signal returns the signal named name (TERM or SIGTERM, any case).
func Signal(name string) (syscall.Signal, bool) {
	name = strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(name)), "SIG")
	for _, s := range signalTable() {
		if s.name == name {
			return s.sig, true
		}
	}
	return 0, false
}

// SignalName returns sig's conventional name ("SIGTERM"), or "signal N"
// for one without a name here.
func SignalName(sig syscall.Signal) string {
	for _, s := range signalTable() {
		if s.sig == sig {
			return "SIG" + s.name
		}
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// SignalNames lists every name, with "SIG", sorted, that keep allows.
func SignalNames(keep func(syscall.Signal) bool) []string {
	var out []string
	for _, s := range signalTable() {
		if keep(s.sig) {
			out = append(out, "SIG"+s.name)
		}
	}
	slices.Sort(out)
	return out
}

// IsStopSignal says whether a worker can be asked to stop with sig: one
// it can catch that means no fault (not ABRT, SEGV, BUS, ...: Go programs
// crash on those, Python's faulthandler dumps).
func IsStopSignal(sig syscall.Signal) bool {
	for _, s := range signalTable() {
		if s.sig == sig {
			return s.stop
		}
	}
	return false
}

// FormatStopSignal is StopSignal's value for sig: its name without
// "SIG"; "" for none (0).
func FormatStopSignal(sig syscall.Signal) string {
	if sig == 0 {
		return ""
	}
	return strings.TrimPrefix(SignalName(sig), "SIG")
}

// ParseStopSignal reads StopSignal's value: 0 for an empty one; an error
// for a name that is not a stop signal, listing those that are.
func ParseStopSignal(v string) (syscall.Signal, error) {
	if strings.TrimSpace(v) == "" {
		return 0, nil
	}
	if sig, ok := Signal(v); ok && IsStopSignal(sig) {
		return sig, nil
	}
	return 0, fmt.Errorf("%q: not a signal a worker can stop on; want one of %s", v, strings.Join(SignalNames(IsStopSignal), ", "))
}

// FormatSignalList is IgnoredSignals' value for sigs: their names
// without "SIG", comma-separated.
func FormatSignalList(sigs []syscall.Signal) string {
	names := make([]string, len(sigs))
	for i, s := range sigs {
		names[i] = strings.TrimPrefix(SignalName(s), "SIG")
	}
	return strings.Join(names, ",")
}

// ParseSignalList reads IgnoredSignals' value; an unknown name is an
// error naming it.
func ParseSignalList(v string) ([]syscall.Signal, error) {
	var out []syscall.Signal
	for _, name := range strings.Split(v, ",") {
		if strings.TrimSpace(name) == "" {
			continue
		}
		sig, ok := Signal(name)
		if !ok {
			return nil, fmt.Errorf("%q: %q is not a signal name; want names such as USR1,TERM", v, name)
		}
		out = append(out, sig)
	}
	return out, nil
}
