package launcher

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/rendezvous"
)

// DryRun is what a launch would start in its first round.
type DryRun struct {
	RunID string `json:"run_id"`
	// MasterPortAtLaunch is true when MASTER_PORT is a free port chosen
	// when the job starts, so the value shown is only a placeholder.
	MasterPortAtLaunch bool     `json:"master_port_chosen_at_launch"`
	Warnings           []string `json:"warnings,omitempty"`
	// Scheduler names the cluster scheduler whose environment gave
	// settings (slurm, kubernetes), "" for none.
	Scheduler string `json:"scheduler,omitempty"`
	// FromScheduler are the settings it gave, applied or not.
	FromScheduler []SchedulerFlag `json:"from_scheduler,omitempty"`
	// Sizes, with --plan, says at which node counts the layout is valid
	// and what each becomes.
	Sizes []DrySize `json:"sizes,omitempty"`
	// Spare is true when this node would wait as a hot spare (its
	// --node-rank is beyond the largest valid size): it starts no worker.
	Spare   bool         `json:"spare,omitempty"`
	Workers []WorkerSpec `json:"workers"`
}

// DrySize is the --plan layout at one node count.
type DrySize struct {
	Nodes        int      `json:"nodes"`
	WorldSize    int      `json:"world_size"`
	Valid        bool     `json:"valid"`
	DP           int      `json:"dp,omitempty"`
	MicroBatches int      `json:"num_microbatches,omitempty"`
	Problems     []string `json:"problems,omitempty"`
}

// SchedulerFlag is the value a cluster scheduler's environment gave one
// of gorun's flags (internal/cmdline/scheduler), as --dry-run shows it.
type SchedulerFlag struct {
	// Flag is the flag it stands for, without dashes.
	Flag  string `json:"flag"`
	Value string `json:"value"`
	// Source names the variables it came from.
	Source string `json:"source"`
	// Overridden is true when the user gave the flag: that value wins.
	Overridden bool `json:"overridden_by_flag,omitempty"`
}

// NewDryRun returns the workers of the first attempt of cfg in round,
// without creating or starting anything; none when this node would be a
// hot spare. A round with MasterPort 0 stands
// for a port chosen at launch. The job secret is shown as
// SecretPlaceholder: a dry run neither makes nor prints one. agentStore:
// the rendezvous lets the agent serve the workers' store
// (AgentStorePorter), which it does for Python workers.
func NewDryRun(cfg *Config, round rendezvous.Round, spare, agentStore bool) (DryRun, error) {
	if err := rendezvous.ValidateRunID(cfg.RunID); err != nil {
		return DryRun{}, err
	}
	round.UseAgentStore = agentStore && cfg.pythonWorkers()
	round.JobSecret = rendezvous.Token(SecretPlaceholder)
	shared, warnings := SharedEnv(cfg)
	warnings = append(warnings, secretWarnings(cfg)...)
	root := "<temporary directory>"
	if cfg.LogDir != "" {
		root = filepath.Join(cfg.LogDir, cfg.RunID+"_<random>")
	}
	// What the agent adds at its start, as it will be.
	if cfg.PreemptGrace > 0 {
		shared = append(shared, (&preemptor{cfg: cfg, stopFile: filepath.Join(root, stopFileName)}).env()...)
	}
	if cfg.pythonWorkers() {
		user, _ := lookupEnv(cfg.Environ, "PYTHONPATH")
		shared = append(shared, EnvVar{"PYTHONPATH", probe.PythonPath("<temporary directory gorun-python-*>", user)})
	}
	errorFile := func(lr int) string {
		return filepath.Join(root, goodput.AttemptName(0), strconv.Itoa(lr), "error.json")
	}
	workers := []WorkerSpec{}
	if !spare {
		var err error
		if workers, err = WorkerSpecs(cfg, shared, round, 0, errorFile); err != nil {
			return DryRun{}, err
		}
	}
	p := DryRun{
		RunID:              round.RunID,
		MasterPortAtLaunch: round.MasterPort == 0,
		Warnings:           warnings,
		Spare:              spare,
		Workers:            workers,
	}
	if cfg.Plan != nil && len(cfg.Plan.Fits) > 1 {
		for _, f := range cfg.Plan.Fits {
			p.Sizes = append(p.Sizes, DrySize{Nodes: f.WorldSize / cfg.NprocPerNode, WorldSize: f.WorldSize, Valid: f.Valid, DP: f.DP, MicroBatches: f.MicroBatches, Problems: f.Problems})
		}
	}
	return p, nil
}

// Write prints the plan as text, or as JSON when format is "json".
func (p DryRun) Write(w io.Writer, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.SetEscapeHTML(false) // "<secret>", not "\u003csecret\u003e"
		return enc.Encode(p)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "run id %s: %s on this node (dry run: nothing started)\n", p.RunID, plural(len(p.Workers), "worker", "workers"))
	if p.MasterPortAtLaunch {
		b.WriteString("MASTER_PORT=0 stands for a free port chosen when the job starts\n")
	}
	if len(p.FromScheduler) > 0 {
		fmt.Fprintf(&b, "\nfrom %s's environment (flags given win):\n", p.Scheduler)
		for _, st := range p.FromScheduler {
			note := ""
			if st.Overridden {
				note = " (not used: --" + st.Flag + " was given)"
			}
			fmt.Fprintf(&b, "  --%s=%s  from %s%s\n", st.Flag, st.Value, st.Source, note)
		}
	}
	if len(p.Sizes) > 0 {
		b.WriteString("\n--plan layout by number of nodes (rounds run at the largest valid size the joined nodes allow; the nodes beyond it wait as hot spares):\n")
		for _, sz := range p.Sizes {
			if sz.Valid {
				fmt.Fprintf(&b, "  %d nodes, %d workers: valid, DP %d, %d micro-batches per step\n", sz.Nodes, sz.WorldSize, sz.DP, sz.MicroBatches)
			} else {
				fmt.Fprintf(&b, "  %d nodes, %d workers: not valid: %s\n", sz.Nodes, sz.WorldSize, strings.Join(sz.Problems, "; "))
			}
		}
	}
	if p.Spare {
		b.WriteString("\nthis node's --node-rank is beyond the largest valid size: it would wait as a hot spare and start no worker until a node is lost\n")
	}
	for _, wk := range p.Workers {
		fmt.Fprintf(&b, "\nrank %d (local rank %d)\n  command: %s\n  environment added by gorun:\n", wk.Rank, wk.LocalRank, shellJoin(wk.Argv))
		for _, v := range wk.Added {
			fmt.Fprintf(&b, "    %s=%s\n", v.Name, v.Value)
		}
	}
	for _, warn := range p.Warnings {
		fmt.Fprintf(&b, "\nnote: %s\n", warn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// shellJoin quotes argv so that it can be pasted into a POSIX shell.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.IndexFunc(a, func(r rune) bool {
			return !(r == '-' || r == '_' || r == '.' || r == '/' || r == '=' || r == ':' || r == ',' || r == '+' ||
				(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
		}) < 0 {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}

// plural is "1 worker" or "3 workers".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}
