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

	"github.com/gorun-dev/gorun/launcher"
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
		&cli.StringFlag{Name: "world-sizes", Usage: "evaluate the layout at each of these world sizes (`8,16,24,32` or FROM-TO[:STEP]), as an elastic job would be resized: TP, PP, VPP, CP, EP stay, DP and the micro-batches per step follow"},
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
		return Usage(err)
	}
	format := c.String("format")
	if format != "text" && format != "json" {
		return Usagef("--format=%q: want text or json", format)
	}
	estimator := c.String("estimator")
	if estimator != memory.EstimatorBridge && estimator != memory.EstimatorMegatronLM {
		return Usagef("--estimator=%q: want %s or %s", estimator, memory.EstimatorBridge, memory.EstimatorMegatronLM)
	}
	capacity, err := planCapacity(cfg)
	if err != nil {
		return Usage(err)
	}
	if ws := c.String("world-sizes"); ws != "" {
		return planSizesAction(c, cfg, ws, capacity, estimator, format)
	}
	plan, err := topology.MakePlan(cfg, capacity, topology.Options{Estimator: estimator, PerRank: format == "json" && !c.Bool("summary")})
	if err != nil {
		return cli.Exit(message(err), 1)
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
		return cli.Exit(message(err), 1)
	}
	if !plan.Valid {
		return cli.Exit("", 1)
	}
	return nil
}

// planSizesAction is `gorun plan --world-sizes`: the layout at each size.
// It exits 0 when the layout is valid at one size at least, 1 otherwise.
func planSizesAction(c *cli.Context, cfg *topology.Config, list string, capacity float64, estimator, format string) error {
	worlds, err := topology.ParseWorldSizes(list)
	if err != nil {
		return Usagef("--world-sizes: %w", err)
	}
	fits, err := topology.FitSizes(cfg, worlds, capacity, topology.Options{Estimator: estimator})
	if err != nil {
		return Usagef("--world-sizes: %w", err)
	}
	if format == "json" {
		enc := json.NewEncoder(c.App.Writer)
		enc.SetIndent("", "  ")
		err = enc.Encode(map[string]any{"sizes": fits})
	} else {
		err = topology.WriteSizesText(c.App.Writer, fits)
	}
	if err != nil {
		return cli.Exit(message(err), 1)
	}
	for _, f := range fits {
		if f.Valid {
			return nil
		}
	}
	return cli.Exit("", 1)
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

// planLayouts reads a plan file for a launch of minNodes to maxNodes
// nodes of nproc workers, and evaluates its layout at each of those
// sizes. The file's nproc_per_node, when given, must be the launch's; its
// world_size too for a fixed number of nodes (an elastic job's follows its
// rounds). The layout must be valid at one size at least; the plan's
// warnings are logged.
func planLayouts(path string, nproc, minNodes, maxNodes int, log *logrus.Logger) (*launcher.LayoutPlan, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	cfg, err := topology.ParseYAML(path, data)
	if err != nil {
		return nil, fmt.Errorf("--plan: %w", err)
	}
	if w, ok := cfg.Get("world_size").(int); ok && minNodes == maxNodes && w != minNodes*nproc {
		return nil, fmt.Errorf("--plan %s: world_size %d, but this launch runs %d workers (nnodes x nproc-per-node)", path, w, minNodes*nproc)
	}
	if n, ok := cfg.Get("nproc_per_node").(int); ok && n != nproc {
		return nil, fmt.Errorf("--plan %s: nproc_per_node %d, but this launch runs --nproc-per-node %d", path, n, nproc)
	}
	if err := cfg.Set("nproc_per_node", nproc); err != nil {
		return nil, err
	}
	capacity, err := planCapacity(cfg)
	if err != nil {
		return nil, fmt.Errorf("--plan %s: %w", path, err)
	}
	worlds := make([]int, 0, maxNodes-minNodes+1)
	for n := minNodes; n <= maxNodes; n++ {
		worlds = append(worlds, n*nproc)
	}
	fits, err := topology.FitSizes(cfg, worlds, capacity, topology.Options{Estimator: memory.EstimatorBridge})
	if err != nil {
		return nil, fmt.Errorf("--plan %s: %w", path, err)
	}
	plan := &launcher.LayoutPlan{Path: path, Fits: fits}
	valid := plan.ValidNodes(nproc)
	if len(valid) == 0 {
		if len(fits) == 1 {
			return nil, fmt.Errorf("--plan %s: the layout is not valid for %d workers:\n  %s", path, fits[0].WorldSize, strings.Join(fits[0].Problems, "\n  "))
		}
		var b strings.Builder
		for _, f := range fits {
			fmt.Fprintf(&b, "\n  %d nodes (%d workers): %s", f.WorldSize/nproc, f.WorldSize, strings.Join(f.Problems, "; "))
		}
		return nil, fmt.Errorf("--plan %s: the layout is valid at no size from %d to %d nodes:%s", path, minNodes, maxNodes, b.String())
	}
	largest := valid[len(valid)-1]
	if err := cfg.SetWorldSize(largest * nproc); err != nil {
		return nil, err
	}
	for _, i := range topology.Validate(cfg) {
		if i.Severity != topology.Error {
			log.Warnf("--plan %s: %s", path, i.Message)
		}
	}
	if minNodes != maxNodes {
		log.Infof("--plan %s: valid at %v nodes of %d workers; rounds run at the largest the joined nodes allow, the other nodes wait as hot spares", path, valid, nproc)
	}
	return plan, nil
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
