// Package flagval reads the values of gorun's launch flags: node
// ranges, signal and exit-code lists, KEY=VALUE lists, output specs and
// --nproc-per-node's device counts. The command line uses it; the
// launcher takes what it read, already parsed.
package flagval

import (
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
)

// ParseNNodes parses torchrun's --nnodes value: "N" or "MIN:MAX" with
// 0 < MIN <= MAX.
func ParseNNodes(s string) (minNodes, maxNodes int, err error) {
	bad := func(why string) (int, int, error) {
		return 0, 0, fmt.Errorf("--nnodes=%q: %s; want N or MIN:MAX with 0 < MIN <= MAX", s, why)
	}
	parts := strings.Split(strings.TrimSpace(s), ":")
	if len(parts) > 2 {
		return bad("more than one ':'")
	}
	lo, err := strconv.Atoi(strings.TrimSpace(parts[0]))
	if err != nil {
		return bad("not an integer")
	}
	hi := lo
	if len(parts) == 2 {
		if hi, err = strconv.Atoi(strings.TrimSpace(parts[1])); err != nil {
			return bad("not an integer")
		}
	}
	if lo < 1 || hi < lo {
		return bad("out of range")
	}
	return lo, hi, nil
}

// ParseStdSpec parses a --redirects or --tee value: one of 0 (none),
// 1 (stdout), 2 (stderr), 3 (both) for every local rank, or a list of
// LOCAL_RANK:VALUE pairs such as "0:3,1:2" (ranks not listed get 0).
// Unlike torchrun, local ranks of more than one digit are accepted.
func ParseStdSpec(flag, s string) (launcher.StdSpec, error) {
	s = strings.TrimSpace(s)
	parseStd := func(v string) (launcher.Std, error) {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || launcher.Std(n) > launcher.StdAll {
			return 0, fmt.Errorf("--%s=%q: %q is not one of 0 (none), 1 (stdout), 2 (stderr), 3 (both)", flag, s, v)
		}
		return launcher.Std(n), nil
	}
	if !strings.Contains(s, ":") {
		v, err := parseStd(s)
		return launcher.StdSpec{Default: v}, err
	}
	spec := launcher.StdSpec{PerRank: map[int]launcher.Std{}}
	for _, pair := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(pair, ":")
		if !ok {
			return launcher.StdSpec{}, fmt.Errorf("--%s=%q: %q is not LOCAL_RANK:VALUE", flag, s, pair)
		}
		r, err := strconv.Atoi(strings.TrimSpace(k))
		if err != nil || r < 0 {
			return launcher.StdSpec{}, fmt.Errorf("--%s=%q: %q is not a local rank", flag, s, k)
		}
		std, err := parseStd(v)
		if err != nil {
			return launcher.StdSpec{}, err
		}
		spec.PerRank[r] = std
	}
	return spec, nil
}

// ParseIntList parses a comma-separated list of integers such as
// --local-ranks-filter or --no-restart-on-exit-codes. An empty string gives
// nil.
func ParseIntList(flag, s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("--%s=%q: %q is not an integer; want a comma-separated list such as 0,1", flag, s, f)
		}
		out = append(out, n)
	}
	return out, nil
}

// ParseExitCodes parses --no-restart-on-exit-codes: exit codes 1..255.
func ParseExitCodes(flag, s string) ([]int, error) {
	codes, err := ParseIntList(flag, s)
	if err != nil {
		return nil, err
	}
	for _, c := range codes {
		if c < 1 || c > 255 {
			return nil, fmt.Errorf("--%s=%q: exit code %d outside 1..255", flag, s, c)
		}
	}
	return codes, nil
}

// ParseSignals parses a comma-separated list of signal names (SIGTERM or
// TERM, any case) as torchrun's --signals-to-handle takes it. SIGKILL and
// SIGSTOP cannot be handled and are refused.
func ParseSignals(flag, s string) ([]syscall.Signal, error) {
	var out []syscall.Signal
	for _, f := range strings.Split(s, ",") {
		name := strings.ToUpper(strings.TrimSpace(f))
		if name == "" {
			continue
		}
		sig, ok := workerenv.Signal(name)
		if !ok || sig == syscall.SIGKILL || sig == syscall.SIGSTOP {
			known := workerenv.SignalNames(func(s syscall.Signal) bool { return s != syscall.SIGKILL && s != syscall.SIGSTOP })
			return nil, fmt.Errorf("--%s=%q: %q cannot be handled; want names from %s", flag, s, f, strings.Join(known, ", "))
		}
		out = append(out, sig)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("--%s=%q: no signal given", flag, s)
	}
	return out, nil
}

// ParseKeyValues parses torchrun's --rdzv-conf syntax "k1=v1,k2=v2". Keys
// and values are trimmed; an empty key or value is an error.
func ParseKeyValues(flag, s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, "=")
		k, v = strings.TrimSpace(k), strings.TrimSpace(v)
		if !ok || k == "" || v == "" {
			return nil, fmt.Errorf("--%s=%q: %q is not KEY=VALUE with a non-empty key and value", flag, s, kv)
		}
		out[k] = v
	}
	return out, nil
}

// Seconds parses flag's value s as a duration (rendezvous.ParseSeconds:
// "30s", "1m30s", or seconds, "30", "0.5"); its error names the flag as
// typed (flag may be "rdzv-conf KEY").
func Seconds(flag, s string) (time.Duration, error) {
	d, err := rendezvous.ParseSeconds(s)
	if err != nil {
		return 0, fmt.Errorf("--%s=%q: %w", flag, s, err)
	}
	return d, nil
}
