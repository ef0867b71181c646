package cmdline

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/topology"
)

// planCommand is `gorun plan`: validate a parallel layout with its model
// and batch, show its rank groups and stages, and estimate its memory.
func planCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "config", Aliases: []string{"c"}, Usage: "YAML file of plan keys (Megatron-LM argument names in snake_case, as in configs/); flags override it"},
		&cli.StringFlag{Name: "format", Value: "text", Usage: "text or json"},
		&cli.BoolFlag{Name: "summary", Usage: "leave the per-rank lists (groups, ranks) out of --format json"},
		&cli.StringFlag{Name: "estimator", Value: memory.EstimatorBridge, Usage: "memory estimator: bridge (Megatron-Bridge's estimate_training_memory) or megatron-lm (report_theoretical_memory)"},
	}
	for _, f := range topology.Fields() {
		var aliases []string
		for _, a := range f.Aliases {
			aliases = append(aliases, strings.ReplaceAll(a, "_", "-"))
		}
		if f.Kind == reflect.Bool {
			flags = append(flags, &cli.BoolFlag{Name: f.Flag(), Aliases: aliases, Usage: f.Doc, Category: "plan keys"})
		} else {
			flags = append(flags, &cli.StringFlag{Name: f.Flag(), Aliases: aliases, Usage: f.Doc, Category: "plan keys"})
		}
	}
	return &cli.Command{
		Name:      "plan",
		Usage:     "check a Megatron parallel layout before launch: rank groups, layers per stage, memory per GPU, advice",
		UsageText: "gorun plan --config configs/llama3-70b.yaml --gpu h100-80gb\ngorun plan --tp 4 --pp 4 --vpp 5 --world-size 32 --num-layers 80 ... --format json",
		Description: "Exit status: 0 for a valid layout, 1 for an invalid one (the report still printed), 2 for bad input.\n" +
			"Keys and flags are Megatron-LM's argument names; a flag overrides the --config file.",
		Flags:  flags,
		Action: planAction,
	}
}

func planAction(c *cli.Context) error {
	cfg, err := planConfig(c)
	if err != nil {
		return usageError("%v", err)
	}
	format := c.String("format")
	if format != "text" && format != "json" {
		return usageError("--format=%q: want text or json", format)
	}
	estimator := c.String("estimator")
	if estimator != memory.EstimatorBridge && estimator != memory.EstimatorMegatronLM {
		return usageError("--estimator=%q: want %s or %s", estimator, memory.EstimatorBridge, memory.EstimatorMegatronLM)
	}
	capacity, err := planCapacity(cfg)
	if err != nil {
		return usageError("%v", err)
	}
	plan, err := topology.MakePlan(cfg, capacity, topology.Options{Estimator: estimator, PerRank: format == "json" && !c.Bool("summary")})
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if format == "json" {
		enc := json.NewEncoder(c.App.Writer)
		if plan.WorldSize <= compactAbove || c.Bool("summary") {
			enc.SetIndent("", "  ")
		}
		err = enc.Encode(plan)
	} else {
		err = plan.WriteText(c.App.Writer)
	}
	if err != nil {
		return cli.Exit(err.Error(), 1)
	}
	if !plan.Valid {
		return cli.Exit("", 1)
	}
	return nil
}

// compactAbove is the world size above which per-rank JSON is written
// without indentation (one rank per line would be millions of lines).
const compactAbove = 1024

// planConfig reads --config, then the flags over it.
func planConfig(c *cli.Context) (*topology.Config, error) {
	cfg := &topology.Config{}
	if path := c.String("config"); path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--config: %w", err)
		}
		if cfg, err = topology.ParseYAML(path, data); err != nil {
			return nil, err
		}
	}
	var errs []error
	for _, f := range topology.Fields() {
		if !c.IsSet(f.Flag()) {
			continue
		}
		var v any
		if f.Kind == reflect.Bool {
			v = c.Bool(f.Flag())
		} else {
			var err error
			if v, err = topology.ParseValue(f, c.String(f.Flag())); err != nil {
				errs = append(errs, fmt.Errorf("--%s: %w", f.Flag(), err))
				continue
			}
		}
		if err := cfg.Set(f.Key, v); err != nil {
			errs = append(errs, fmt.Errorf("--%s: %w", f.Flag(), err))
		}
	}
	return cfg, errors.Join(errs...)
}

// planLayout reads a plan file for a launch of world workers, nproc per
// node: the file's world size and ranks per node, when given, must be the
// launch's, and its layout must be valid for it (warnings are logged).
func planLayout(path string, nproc, world int, log *logrus.Logger) (*topology.Layout, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	cfg, err := topology.ParseYAML(path, data)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	if w, ok := cfg.Get("world_size").(int); ok && w != world {
		return nil, fmt.Errorf("--plan %s: world_size %d, but this launch runs %d workers (nnodes x nproc-per-node)", path, w, world)
	}
	if n, ok := cfg.Get("nproc_per_node").(int); ok && n != nproc {
		return nil, fmt.Errorf("--plan %s: nproc_per_node %d, but this launch runs --nproc-per-node %d", path, n, nproc)
	}
	if err := errors.Join(cfg.Set("world_size", world), cfg.Set("nproc_per_node", nproc), cfg.Set("nnodes", nil)); err != nil {
		return nil, err
	}
	var errs []string
	for _, i := range topology.Validate(cfg) {
		if i.Severity == topology.Error {
			errs = append(errs, i.Message)
		} else {
			log.Warnf("--plan %s: %s", path, i.Message)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("--plan %s: the layout is not valid for %d workers:\n  %s", path, world, strings.Join(errs, "\n  "))
	}
	l := cfg.Resolve().Layout()
	return &l, nil
}

// planCapacity is gpu_memory, else the gpu preset's memory, else 0.
func planCapacity(cfg *topology.Config) (float64, error) {
	if s, ok := cfg.Get("gpu_memory").(string); ok {
		b, err := memory.ParseBytes(s)
		if err != nil {
			return 0, fmt.Errorf("--gpu-memory: %w", err)
		}
		return b, nil
	}
	if s, ok := cfg.Get("gpu").(string); ok {
		return memory.DeviceMemory(s)
	}
	return 0, nil
}
