package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/netns"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// RecoveryConfig configures `gorun bench recovery`: how long an elastic
// job stands still after a fault, gorun, torchrun and NVIDIA's ft_launcher
// in the same run, with the same PyTorch workers: local agents
// (--nnodes=2:3, one gloo DDP worker each, 0.1-s steps) over c10d, each
// launcher's recommended settings.
type RecoveryConfig struct {
	// Gorun is the gorun binary; Python runs the workers and torchrun.
	Gorun, Python string
	// FTLauncher is NVIDIA's ft_launcher (nvidia-resiliency-ext), run with
	// the same Python; "" measures without it.
	FTLauncher string
	// Lighthouse is torchft's torchft_lighthouse: with it, the faults are
	// also measured on the job written for torchft (torchft.go); ""
	// measures without it.
	Lighthouse string
	// Runs is the number of measured faults per launcher and fault.
	Runs int
	// SkipTorchrun measures gorun alone.
	SkipTorchrun bool
	// Only, when not empty, names the launchers and faults measured (a
	// run for one of them); the rest are left out.
	Only []string
	// Notes receives a line per run.
	Notes io.Writer
}

// RecoveryResult holds the figures: Recovery by fault, then launcher
// (fault to every survivor's first step in the new world), and Startup by
// launcher (a round's close to each restarted worker's first statement
// after its imports, gorun's only).
type RecoveryResult struct {
	Machine  Machine `json:"machine"`
	Torchrun string  `json:"torchrun"`
	// FTLauncher names the ft_launcher measured, or why none was.
	FTLauncher string `json:"ft_launcher"`
	// TorchFT names the torchft measured, or why none was.
	TorchFT  string                      `json:"torchft"`
	Recovery map[string]map[string]Stats `json:"recovery"`
	Startup  map[string]Stats            `json:"startup"`
	// Lost is what gorun's own goodput report (events.jsonl) counts as
	// lost to the fault on a survivor, by fault then launcher: from the
	// failed attempt's last reported step to the next spawn.
	Lost map[string]map[string]Stats `json:"goodput_lost"`
	// NotMeasured says why a fault was not measured (the network cut
	// where namespaces cannot be made).
	NotMeasured map[string]string `json:"not_measured,omitempty"`
	// Failed counts runs that never trained again within recoveryLimit.
	Failed map[string]int `json:"failed,omitempty"`
}

// The launchers measured.
const (
	torchrunName   = "torchrun"
	ftLauncherName = "ft_launcher"
	gorunName      = "gorun"
	gorunWarm      = "gorun --warm-start"
)

// rival says whether launcher l is another than gorun.
func rival(l string) bool { return l == torchrunName || l == ftLauncherName || l == torchftName }

// hangTimeout is gorun's --hang-timeout in the hang fault's jobs.
const hangTimeout = "5s"

// rivalHangLimit bounds the wait for a rival to recover from a hang: it
// has no hang detection for a script that does not report to it.
const rivalHangLimit = time.Minute

// A fault of the benchmark.
type fault struct {
	name, what string
	// agents is the number of agents (one more than 3: a hot spare);
	// cut runs them on hosts of their own (network namespaces).
	agents int
	cut    bool
	// hang: the victim's worker stops making progress (it sleeps in the
	// middle of a step, as in a stuck collective) instead of dying.
	hang bool
	// rivals: measured for torchrun and ft_launcher too.
	rivals bool
}

// recoveryFaults are the faults, in the report's order.
var recoveryFaults = []fault{
	{name: "node-kill", what: "node kill (agent and worker, SIGKILL) -> both survivors' first step in a world of 2", agents: 3, rivals: true},
	{name: "worker-kill", what: "worker kill (SIGKILL) -> every worker's first step of the next attempt", agents: 3, rivals: true},
	{name: "worker-hang", what: "worker hang (it sleeps mid-step; the others wait in their all-reduce) -> every worker's first step of the next attempt (gorun: `--hang-timeout=" + hangTimeout + "`)", agents: 3, hang: true, rivals: true},
	{name: "node-kill-spare", what: "node kill with a hot spare (4 agents, 3 train) -> the survivors' and the spare's first step in the new world of 3", agents: 4},
	{name: "node-cut", what: "node cut (its network, namespaces) -> both survivors' first step in a world of 2", agents: 3, cut: true},
}

// recoveryWorker trains a tiny all-reduce loop and prints each step with
// its time, world size and attempt; its first statement after its
// imports prints the time.
const recoveryWorker = `import os, sys, time, torch, torch.distributed as dist
print(f"imported={time.time():.6f}", flush=True)
dist.init_process_group("gloo")
w, r, a = dist.get_world_size(), dist.get_rank(), os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
print(f"pid={os.getpid()} rank={r}", flush=True)
progress, first = os.environ.get("` + workerenv.ProgressFile + `"), None
hang = os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), f"hang.{os.getpid()}")
t = torch.ones(1000)
step = 0
while True:
    if os.path.exists(hang):  # the hang fault: stuck mid-step
        time.sleep(3600)
    dist.all_reduce(t)
    print(f"t={time.time():.6f} step={step} world={w} attempt={a} rank={r}", flush=True)
    if progress:  # gorun's goodput report
        now = time.time_ns()
        first = first or (step, now)
        with open(progress + ".tmp", "w") as f:
            f.write(f"step={step} time={now} first_step={first[0]} first_time={first[1]}\n")
        os.replace(progress + ".tmp", progress)
    step += 1
    time.sleep(0.1)
`

// recoveryLimit bounds one run's wait for training (again).
const recoveryLimit = 3 * time.Minute

var stepLine = regexp.MustCompile(`t=([0-9.]+) step=(\d+) world=(\d+) attempt=(\d+)`)

// RunRecovery measures every fault for every launcher, alternating run by
// run.
func RunRecovery(ctx context.Context, cfg RecoveryConfig) (RecoveryResult, error) {
	res := RecoveryResult{Machine: Describe(ctx, cfg.Python), Torchrun: "not measured (--skip-torchrun)",
		Recovery: map[string]map[string]Stats{}, Startup: map[string]Stats{}, Lost: map[string]map[string]Stats{}, NotMeasured: map[string]string{}, Failed: map[string]int{}}
	dir, err := os.MkdirTemp("", "gorun-bench-recovery-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	script := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(script, []byte(recoveryWorker), 0o644); err != nil {
		return res, err
	}
	launchers := []string{gorunName, gorunWarm}
	res.FTLauncher = "ft_launcher not measured (no --ft-launcher)"
	if !cfg.SkipTorchrun {
		if res.Torchrun, err = torchrunVersion(ctx, cfg.Python); err != nil {
			return res, err
		}
		if cfg.FTLauncher != "" {
			if res.FTLauncher, err = ftLauncherVersion(ctx, cfg.Python, cfg.FTLauncher); err != nil {
				return res, err
			}
			launchers = append([]string{ftLauncherName}, launchers...)
		}
		res.TorchFT = "torchft not measured (no --lighthouse)"
		if cfg.Lighthouse != "" {
			if res.TorchFT, err = packageVersion(ctx, cfg.Python, "torchft"); err != nil {
				return res, err
			}
			res.TorchFT = fmt.Sprintf("%s (Manager timeout %d s, as its example; lighthouse: min 1 replica, 100-ms tick)", res.TorchFT, torchftTimeout)
			launchers = append([]string{torchftName}, launchers...)
		}
		launchers = append([]string{torchrunName}, launchers...)
	}
	hosts, err := netns.New(3)
	switch {
	case errors.Is(err, netns.ErrUnavailable):
		res.NotMeasured["node-cut"] = err.Error()
	case err != nil:
		return res, err
	default:
		defer hosts.Close()
	}
	samples := map[string]*Sample{}
	add := func(key string, d ...time.Duration) {
		if samples[key] == nil {
			samples[key] = &Sample{}
		}
		*samples[key] = append(*samples[key], d...)
	}
	for i := range cfg.Runs {
		for _, f := range recoveryFaults {
			if f.cut && hosts == nil {
				continue
			}
			for _, l := range launchers {
				if rival(l) && !f.rivals || !cfg.measures(l, f.name) {
					continue
				}
				run := recoveryRun{cfg: cfg, launcher: l, fault: f, script: script, dir: dir, n: i}
				if f.cut {
					run.hosts = hosts
				}
				d, startups, lost, err := run.measure(ctx)
				key := f.name + " " + l
				if err != nil {
					res.Failed[key]++
					fmt.Fprintf(cfg.Notes, "bench recovery: %s, %s, run %d: %v\n", f.name, l, i+1, err)
					continue
				}
				add(key, d)
				add("startup "+l, startups...)
				if lost > 0 {
					add("lost "+key, lost)
				}
				fmt.Fprintf(cfg.Notes, "bench recovery: %s, %s, run %d: %s\n", f.name, l, i+1, ms(d))
			}
		}
	}
	for _, f := range recoveryFaults {
		res.Recovery[f.name], res.Lost[f.name] = map[string]Stats{}, map[string]Stats{}
		for _, l := range launchers {
			if s := samples[f.name+" "+l]; s != nil {
				res.Recovery[f.name][l] = s.Stats()
			}
			if s := samples["lost "+f.name+" "+l]; s != nil {
				res.Lost[f.name][l] = s.Stats()
			}
		}
	}
	for _, l := range launchers {
		if s := samples["startup "+l]; s != nil {
			res.Startup[l] = s.Stats()
		}
	}
	return res, nil
}

// Markdown renders the result as docs/benchmarks.md's recovery section.
func (r RecoveryResult) Markdown(when time.Time, runs int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Recovery (`gorun bench recovery`)\n\n")
	fmt.Fprintf(&b, "Measured %s on %s; %s; %s; %s. The same job under each launcher, alternating run by run: local agents (`--nnodes=2:3`, one PyTorch gloo DDP worker each, an all-reduce every 0.1 s; a script that knows nothing of any launcher) over c10d, each launcher's recommended settings (gorun: its defaults, lease 4 s; torchrun: `--monitor-interval=0.1`; ft_launcher: its defaults, the any-failed restart policy); `gorun --warm-start --warm-imports=torch,torch.distributed` beside plain gorun. %d runs per case; median [min-max]. The store's host (the first agent) is never the one lost; the cut runs each agent in a network namespace of its own and gorun alone (torchrun's agents advertise the machine's host name, which every namespace shares). torchrun has no hang detection, nor has ft_launcher for a worker that sends it no heartbeats (its rank monitor client): each is given %v to recover from a hang. torchft runs the same loop written for it (its Manager, whose allreduce averages the gradients as its DDP wrapper's hook does, and its optimizer wrapper: the DDP wrapper itself fails under torch 2.15 once an allreduce fails; one single-node torchrun per agent, a replica group each, meeting at its lighthouse): its survivors do not restart, so its figure is the time to the survivors' first committed step without the lost replica, whatever the fault, not every worker's first step.\n\n",
		when.UTC().Format("2006-01-02 15:04 MST"), r.Machine, r.Torchrun, r.FTLauncher, r.TorchFT, runs, rivalHangLimit)
	b.WriteString("| fault -> training again | torchrun | ft_launcher | torchft (survivors go on) | gorun | gorun --warm-start | torchrun / gorun | ft_launcher / gorun | gorun / warm |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range recoveryFaults {
		s := r.Recovery[f.name]
		what := f.what
		if why, ok := r.NotMeasured[f.name]; ok {
			what += " (not measured: " + why + ")"
		}
		cell := func(l string) string {
			n := r.Failed[f.name+" "+l]
			if n == 0 {
				return secs(s[l])
			}
			limit := recoveryLimit
			if f.hang && rival(l) {
				limit = rivalHangLimit
			}
			if s[l].N == 0 {
				return fmt.Sprintf("never within %v (%d runs)", limit, n)
			}
			return fmt.Sprintf("%s; %d more never within %v", secs(s[l]), n, limit)
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", what, cell(torchrunName), cell(ftLauncherName), cell(torchftName), cell(gorunName), cell(gorunWarm),
			ratio(s[torchrunName], s[gorunName]), ratio(s[ftLauncherName], s[gorunName]), ratio(s[gorunName], s[gorunWarm]))
	}
	fmt.Fprintf(&b, "| a round's close (the agent's spawn event) -> each restarted worker's first statement after `import torch`, every fault | n/a | n/a | n/a | %s | %s | | | %s |\n",
		millis(r.Startup[gorunName]), millis(r.Startup[gorunWarm]), ratio(r.Startup[gorunName], r.Startup[gorunWarm]))
	b.WriteString("\ngorun's own goodput report (`gorun report`, a survivor's events.jsonl) for the same runs: time lost to the fault, from the failed attempt's last reported step to the next spawn (the workers' start-up, above, comes after it):\n\n")
	b.WriteString("| fault | gorun | gorun --warm-start |\n|---|---|---|\n")
	for _, f := range recoveryFaults {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", f.name, secs(r.Lost[f.name][gorunName]), secs(r.Lost[f.name][gorunWarm]))
	}
	if len(r.Failed) > 0 {
		keys := slices.Sorted(maps.Keys(r.Failed))
		var parts []string
		for _, k := range keys {
			parts = append(parts, fmt.Sprintf("%s: %d", k, r.Failed[k]))
		}
		fmt.Fprintf(&b, "\nRuns that never trained again (within %v, or %v for a rival's hang): %s.\n", recoveryLimit, rivalHangLimit, strings.Join(parts, ", "))
	}
	return b.String()
}

// millis renders stats in milliseconds.
func millis(st Stats) string {
	if st.N == 0 {
		return "n/a"
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	return fmt.Sprintf("%.0f ms [%.0f-%.0f]", ms(st.Median), ms(st.Min), ms(st.Max))
}

// secs renders stats in seconds.
func secs(st Stats) string {
	if st.N == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f s [%.2f-%.2f]", st.Median.Seconds(), st.Min.Seconds(), st.Max.Seconds())
}

// measures says whether Only leaves launcher l and fault f in.
func (cfg RecoveryConfig) measures(l, f string) bool {
	if len(cfg.Only) == 0 {
		return true
	}
	return slices.Contains(cfg.Only, l) && (slices.Contains(cfg.Only, f) || !slices.ContainsFunc(cfg.Only, isFault))
}

// isFault says whether name is a fault's.
func isFault(name string) bool {
	return slices.ContainsFunc(recoveryFaults, func(f fault) bool { return f.name == name })
}
