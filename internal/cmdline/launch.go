package cmdline

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/cmdline/flagval"
	"github.com/gorun-dev/gorun/internal/secret"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
)

// launchAction runs `gorun [flags] SCRIPT [ARGS...]`.
func launchAction(c *cli.Context, opts Options) error {
	if c.IsSet(fCompletion) {
		if err := printCompletion(c.App.Writer, c.String(fCompletion), c.App.Flags); err != nil {
			return Usage(err)
		}
		return nil
	}
	// A console that went away (`gorun ... | head`) must not kill gorun
	// with SIGPIPE and orphan the run's clean-up: its writes then fail,
	// and the job goes on, as under torchrun (Python ignores SIGPIPE).
	// Caught, not ignored: the workers start with the default action.
	sigpipe := make(chan os.Signal, 1)
	signal.Notify(sigpipe, syscall.SIGPIPE)
	defer signal.Stop(sigpipe)
	// The workers run as this user: they must not read the job's token
	// or passwords from this process (/proc/<gorun>/environ, its memory).
	if err := private.HideSecrets(); err != nil {
		return cli.Exit(message(err), 1)
	}
	level, levelNote := c.String(fLogLevel), ""
	if !c.IsSet(fLogLevel) {
		level, levelNote = levelFromPython(os.Getenv(pythonLogLevelEnv), level)
	}
	log, err := newLogger(level, c.App.ErrWriter)
	if err != nil {
		return Usage(err)
	}
	if levelNote != "" {
		log.Warn(levelNote)
	}
	schedName, fromScheduler, storeHosts, logSchedulerNote, err := applyScheduler(c)
	if err != nil {
		return Usage(err)
	}
	// Which binary runs the launch is decided before it is parsed: the
	// gorun binary hands a launch that needs etcd over at once, and
	// gorun-etcd parses it, once.
	if opts.Companion == nil && needsEtcd(c) {
		return execCompanion("--rdzv-backend=" + c.String(fRdzvBackend))
	}
	cfg, err := launchConfig(c, log)
	if err != nil {
		return Usage(err)
	}
	choice, err := selectRendezvous(c, &cfg, log)
	if err != nil {
		return Usage(err)
	}
	round := choice.round
	if choice.elastic != nil {
		choice.elastic.StoreHosts = storeHosts
	}
	spare, err := applyLayoutPlan(c.String(fPlan), &cfg, &choice, &round, log)
	if err != nil {
		return Usage(err)
	}
	logSchedulerNote(log)
	if err := cfg.Validate(); err != nil {
		return Usage(err)
	}
	if c.Bool(fDryRun) {
		_, porter := choice.rdzv.(launcher.AgentStorePorter)
		return dryRun(c, &cfg, round, spare, porter || choice.elastic != nil, schedName, fromScheduler)
	}
	rdzv, release, err := openRendezvous(c.Context, choice, &cfg, opts, log)
	if err != nil {
		return err
	}
	defer release()
	return runAgent(c.Context, cfg, rdzv)
}

// needsEtcd says, from the flags alone, whether the launch's rendezvous
// needs etcd, that is gorun-etcd: an elastic one (backendOf), not a dry
// run. Bad input is left to the launch's parse.
func needsEtcd(c *cli.Context) bool {
	if c.Bool(fDryRun) {
		return false
	}
	_, maxNodes, err := flagval.ParseNNodes(c.String(fNnodes))
	if err != nil {
		return false
	}
	kind, err := backendOf(c.String(fRdzvBackend), c.Bool(fStandalone), maxNodes)
	return err == nil && kind == elasticBackend
}

// backendKind is which rendezvous a launch runs.
type backendKind int

const (
	// singleNodeBackend: --standalone, or a job of one node, whatever
	// --rdzv-backend says: no store.
	singleNodeBackend backendKind = iota
	// elasticBackend: the etcd rendezvous (c10d, embedded, etcd,
	// etcd-v2), in gorun-etcd.
	elasticBackend
	// staticBackend: torchrun's static rendezvous.
	staticBackend
)

// backendOf is the one place that says which rendezvous the flags ask
// for: --rdzv-backend's value, --standalone, and the largest node count.
func backendOf(backend string, standalone bool, maxNodes int) (backendKind, error) {
	switch backend {
	case "static", "c10d", "etcd", "etcd-v2", "embedded":
	default:
		return 0, fmt.Errorf("--rdzv-backend=%q: want static, c10d, embedded, etcd or etcd-v2", backend)
	}
	switch {
	case standalone || maxNodes == 1:
		return singleNodeBackend, nil
	case backend == "static":
		return staticBackend, nil
	}
	return elasticBackend, nil
}

// openRendezvous opens the launch's rendezvous, whichever backend it is:
// the elastic one through gorun-etcd's companion, the single node of
// --standalone with its store for Go workers, or the static and
// single-node ones as planned. release frees what it started.
func openRendezvous(ctx context.Context, choice rendezvousChoice, cfg *launcher.Config, opts Options, log *logrus.Logger) (launcher.Rendezvous, func(), error) {
	switch {
	case choice.elastic != nil:
		choice.elastic.Log = log
		rdzv, release, err := opts.Companion.Rendezvous(ctx, *choice.elastic)
		if err != nil {
			return nil, nil, ExitError(err, 1)
		}
		return rdzv, release, nil
	case choice.standalone != nil:
		// One secret for the job: the store checks it, the workers
		// present it.
		var err error
		if cfg.JobSecret, err = launcher.NewSecret(); err != nil {
			return nil, nil, cli.Exit(message(err), 1)
		}
		store := startLocalStore(log, cfg.JobSecret)
		if store == nil {
			return choice.rdzv, func() {}, nil
		}
		local := *choice.standalone
		local.StoreEndpoints, local.StorePrefix = []string{store.Endpoint()}, "/gorun/"+cfg.RunID+"/store/"
		local.StoreUser, local.StorePassword = rendezvous.EtcdUser, cfg.JobSecret.Reveal()
		return rendezvous.NewLocal(local), func() {
			if err := store.Stop(); err != nil {
				log.Warnf("stop the local store: %v", err)
			}
		}, nil
	}
	return choice.rdzv, func() {}, nil
}

// applyLayoutPlan reads --plan (path; "" for none) into cfg.Plan. An
// elastic job then rounds at the node counts the layout allows, and the
// dry run shows the largest; spare says this node's rank is beyond it.
func applyLayoutPlan(path string, cfg *launcher.Config, choice *rendezvousChoice, round *rendezvous.Round, log *logrus.Logger) (spare bool, err error) {
	if path == "" {
		return false, nil
	}
	lo, hi := round.GroupWorldSize, round.GroupWorldSize
	if choice.elastic != nil {
		lo, hi = choice.elastic.MinNodes, choice.elastic.MaxNodes
	}
	if cfg.Plan, err = planLayouts(path, cfg.NprocPerNode, lo, hi, log); err != nil {
		return false, err
	}
	if choice.elastic != nil && lo != hi {
		valid := cfg.Plan.ValidNodes(cfg.NprocPerNode)
		choice.elastic.Sizes = valid
		n := valid[len(valid)-1]
		rank := round.GroupRank
		spare = rank >= n
		round.Place(min(rank, n-1), rendezvous.Uniform(n, cfg.NprocPerNode, cfg.Role))
		round.GroupRank = rank // a hot spare has no place in the round: it shows its own rank
	}
	return spare, nil
}

// dryRun prints what the launch would do (--dry-run).
func dryRun(c *cli.Context, cfg *launcher.Config, round rendezvous.Round, spare, agentStore bool, schedName string, fromScheduler []launcher.SchedulerFlag) error {
	format := c.String(fFormat)
	if format != "text" && format != "json" {
		return Usagef("--format=%q: want text or json", format)
	}
	dry, err := launcher.NewDryRun(cfg, round, spare, agentStore)
	if err != nil {
		return Usage(err)
	}
	dry.Scheduler, dry.FromScheduler = schedName, fromScheduler
	if err := dry.Write(c.App.Writer, format); err != nil {
		return cli.Exit(message(err), 1)
	}
	return nil
}

// runAgent runs the agent with cfg over rdzv, with gorun's signals
// routed to it, and maps its result to gorun's exit.
func runAgent(ctx context.Context, cfg launcher.Config, rdzv launcher.Rendezvous) error {
	sigs := make(chan os.Signal, 8)
	var subscribed []os.Signal
	for _, s := range cfg.StopSignals {
		subscribed = append(subscribed, s)
	}
	for _, s := range cfg.ForwardSignals {
		subscribed = append(subscribed, s)
	}
	for _, s := range cfg.QuitSignals {
		subscribed = append(subscribed, s)
	}
	if cfg.PreemptGrace > 0 {
		for _, s := range cfg.PreemptSignals {
			subscribed = append(subscribed, s)
		}
	}
	signal.Notify(sigs, subscribed...)
	// Ignored, not reset, once the agent is done: a late signal must not
	// turn the exit code (75, say) into its own default death.
	defer signal.Ignore(subscribed...)

	agent, err := launcher.NewAgent(cfg, rdzv, sigs)
	if err != nil {
		return Usage(err)
	}
	res, err := agent.Run(ctx)
	if err != nil {
		return ExitError(err, max(res.ExitCode, 1))
	}
	if res.ExitCode != 0 {
		return cli.Exit("", res.ExitCode)
	}
	return nil
}

// startLocalStore starts the embedded store of --standalone in
// gorun-etcd, or returns nil with a warning when that binary is missing
// or fails to start: the workers then have no store (PyTorch's do not use
// it).
func startLocalStore(log *logrus.Logger, secret secret.Secret) *launcher.LocalStore {
	path, err := findCompanion()
	if err == nil {
		var store *launcher.LocalStore
		if store, err = launcher.StartLocalStore(path, os.Stderr, secret); err == nil {
			log.Debugf("--standalone: local store at %s", store.Endpoint())
			return store
		}
	}
	log.Warnf("--standalone: no store for the workers (GORUN_STORE_ENDPOINTS unset): %v", err)
	return nil
}

// launchConfig maps the flags to the agent's configuration.
func launchConfig(c *cli.Context, log *logrus.Logger) (launcher.Config, error) {
	cfg := launcher.NewConfig()
	cfg.Stdout, cfg.Stderr, cfg.Log = c.App.Writer, c.App.ErrWriter, log
	if _, err := os.Stdin.Stat(); err == nil {
		cfg.Stdin = os.Stdin // the workers' own, as torchrun's (none if it is closed)
	}

	args := c.Args().Slice()
	if len(args) == 0 {
		return cfg, errors.New("no training script given: usage: gorun [flags] SCRIPT [ARGS...]")
	}
	cfg.Entrypoint = launcher.Entrypoint{
		Script:   args[0],
		Args:     args[1:],
		Module:   c.Bool(fModule),
		NoPython: c.Bool(fNoPython),
		RunPath:  c.Bool(fRunPath),
		Python:   strings.Fields(c.String(fPython)),
	}
	n, what, err := flagval.NewDeviceProbe().ResolveNproc(c.Context, c.String(fNprocPerNode))
	if err != nil {
		return cfg, err
	}
	if what != "" {
		log.Infof("--nproc-per-node=%s: %d workers, one per %s", c.String(fNprocPerNode), n, strings.TrimSuffix(what, "s"))
	}
	cfg.NprocPerNode = n
	if cfg.VirtualLocalRank = c.Bool(fVirtualRank); cfg.VirtualLocalRank {
		// Every local rank needs a GPU of its own: said before anything
		// starts (torchrun 2.x raises it when it builds the workers).
		if _, _, err := launcher.VisibleDevice(cfg.Environ, n-1); err != nil {
			return cfg, err
		}
	}
	if mode := c.String(fNumaBinding); mode != "" {
		// As torchrun 2.x: each local rank near the GPU of its index.
		// What cannot be bound is said before anything starts.
		cpus, notes, err := launcher.NewNUMAProbe().Bind(c.Context, mode, n)
		if err != nil {
			return cfg, err
		}
		cfg.NUMACPUs = cpus
		for _, note := range notes {
			log.Info(note)
		}
	}
	cfg.Role = c.String(fRole)
	cfg.WarmStart = c.Bool(fWarmStart)
	if v := c.String(fWarmImports); v != "" {
		for _, m := range strings.Split(v, ",") {
			cfg.WarmImports = append(cfg.WarmImports, strings.TrimSpace(m))
		}
	}
	if err := parseRestartsAndSignals(c, &cfg); err != nil {
		return cfg, err
	}
	cfg.ReportFile = c.String(fReport)
	if err := parseOutput(c, &cfg, log); err != nil {
		return cfg, err
	}
	if err := checkTorchrunOnlyFlags(c, log); err != nil {
		return cfg, err
	}
	return cfg, nil
}

// parseRestartsAndSignals reads the restart policy, the stop and hang
// timeouts, and the signals gorun stops, forwards and preempts on.
func parseRestartsAndSignals(c *cli.Context, cfg *launcher.Config) error {
	var err error
	cfg.MaxRestarts = c.Int(fMaxRestarts)
	if cfg.NoRestartExitCodes, err = flagval.ParseExitCodes(fNoRestartCodes, c.String(fNoRestartCodes)); err != nil {
		return err
	}
	if cfg.RestartBackoff, err = flagval.Seconds(fBackoff, c.String(fBackoff)); err != nil {
		return err
	}
	if cfg.RestartBackoffMax, err = flagval.Seconds(fBackoffMax, c.String(fBackoffMax)); err != nil {
		return err
	}
	if cfg.StopTimeout, err = flagval.Seconds(typedName(fStopTimeout, fShutdownTimeout), c.String(fStopTimeout)); err != nil {
		return err
	}
	if cfg.HangTimeout, err = flagval.Seconds(fHangTimeout, c.String(fHangTimeout)); err != nil {
		return err
	}
	switch v := c.String(fWorkerProbe); v {
	case "on":
		cfg.WorkerProbe = true
	case "off":
		cfg.WorkerProbe = false
	default:
		return fmt.Errorf("--%s=%q: want on or off", fWorkerProbe, v)
	}
	if cfg.StopSignals, err = flagval.ParseSignals(fSignals, c.String(fSignals)); err != nil {
		return err
	}
	cfg.ForwardSignals = nil
	for _, s := range []syscall.Signal{syscall.SIGUSR1, syscall.SIGUSR2} {
		if !slices.Contains(cfg.StopSignals, s) {
			cfg.ForwardSignals = append(cfg.ForwardSignals, s)
		}
	}
	cfg.QuitSignals = nil
	if !slices.Contains(cfg.StopSignals, syscall.SIGQUIT) {
		cfg.QuitSignals = []syscall.Signal{syscall.SIGQUIT}
	}
	if cfg.PreemptGrace, err = flagval.Seconds(fPreemptGrace, c.String(fPreemptGrace)); err != nil {
		return err
	}
	if cfg.PreemptSignals, err = flagval.ParseSignals(fPreemptSignal, c.String(fPreemptSignal)); err != nil {
		return err
	}
	if cfg.PreemptWorkerSignal, err = parseWorkerSignal(c.String(fPreemptWorkerSig)); err != nil {
		return err
	}
	return nil
}

// parseOutput reads where the workers' output goes and how it is shown.
func parseOutput(c *cli.Context, cfg *launcher.Config, log *logrus.Logger) error {
	var err error
	cfg.LogDir = c.String(fLogDir)
	if st, err := os.Stat(cfg.LogDir); err == nil && !st.IsDir() {
		return fmt.Errorf("--log-dir=%q is a file; want a folder (made if missing)", cfg.LogDir)
	}
	if cfg.LogDir != "" {
		// One path from here on, the one the kernel resolves: gorun and
		// its workers then use the folder that was checked.
		if cfg.LogDir, err = launcher.ResolveLogDir(cfg.LogDir); err != nil {
			return err
		}
	}
	if cfg.Redirects, err = flagval.ParseStdSpec(fRedirects, c.String(fRedirects)); err != nil {
		return err
	}
	if cfg.Tee, err = flagval.ParseStdSpec(fTee, c.String(fTee)); err != nil {
		return err
	}
	if cfg.LocalRanksFilter, err = flagval.ParseIntList(fLocalRanks, c.String(fLocalRanks)); err != nil {
		return err
	}
	var absent []string
	for _, r := range cfg.LocalRanksFilter {
		if r >= cfg.NprocPerNode {
			absent = append(absent, strconv.Itoa(r))
		}
	}
	if len(absent) > 0 {
		log.Infof("--local-ranks-filter: local ranks %s are not on this node (%d workers); the others are shown", strings.Join(absent, ","), cfg.NprocPerNode)
	}
	cfg.PrefixTemplate = c.String(fPrefixTemplate)
	cfg.NoPrefix = c.Bool(fNoPrefix)
	// As torchrun 2.x: a flag given, even empty, filters (an empty
	// string is in every line); not given, no file.
	if c.IsSet(fDupStdout) {
		cfg.DuplicateStdoutFilters = launcher.ParseFilters(c.String(fDupStdout))
	}
	if c.IsSet(fDupStderr) {
		cfg.DuplicateStderrFilters = launcher.ParseFilters(c.String(fDupStderr))
	}
	cfg.MemoryDefaults = !c.Bool(fNoMemoryDefaults)
	return nil
}

// checkTorchrunOnlyFlags refuses or warns about torchrun flags whose
// behaviour gorun does not have.
func checkTorchrunOnlyFlags(c *cli.Context, log *logrus.Logger) error {
	// "default" is torch's own registered LogsSpecs (DefaultLogsSpecs):
	// what gorun does with --log-dir, --redirects and --tee.
	if v := c.String(fLogsSpecs); v != "" && v != "default" {
		return fmt.Errorf("--logs-specs=%q names a torchrun LogsSpecs plugin, which gorun cannot load; use --log-dir, --redirects and --tee", v)
	}
	if v := c.String(fEventLogHandler); v != "null" {
		log.Warnf("--event-log-handler=%q ignored: gorun has no event log handler plugins", v)
	}
	switch m := c.String(fStartMethod); m {
	case "spawn", "fork", "forkserver":
	default:
		return fmt.Errorf("--start-method=%q: want spawn, fork or forkserver", m)
	}
	if v := c.Float64(fMonitorInterval); v <= 0 {
		return fmt.Errorf("--monitor-interval=%v: want a positive number of seconds", v)
	}
	return nil
}

// singleNodeSetup is the rendezvous of one node (--standalone, or
// --nnodes=1): no store.
func singleNodeSetup(c *cli.Context, cfg *launcher.Config, round rendezvous.Round, maxNodes int, log *logrus.Logger) (rendezvousChoice, error) {
	if maxNodes > 1 {
		log.Warnf("--standalone runs a single node: ignoring --nnodes=%s", c.String(fNnodes))
	}
	local := rendezvous.LocalConfig{RunID: cfg.RunID, MaxRestarts: cfg.MaxRestarts}
	// torchrun 2.x runs a single-node static launch without an endpoint
	// or a master port as --standalone does, under a fresh run id; a
	// --rdzv-id given is kept here (torchrun 2.x replaces it).
	fresh := c.String(fRdzvBackend) == "static" && !c.IsSet(fRdzvID) && !c.IsSet(fRdzvEndpoint) && !c.IsSet(fMasterPort)
	if c.Bool(fStandalone) || fresh {
		id, err := newRunID()
		if err != nil {
			return rendezvousChoice{}, err
		}
		cfg.RunID, local.RunID = id, id
	}
	if !c.Bool(fStandalone) {
		if c.IsSet(fMasterAddr) {
			local.MasterAddr = c.String(fMasterAddr)
		} else if a := c.String(fLocalAddr); a != "" {
			local.MasterAddr = a // this node is rank 0: it advertises its own address
		}
		if c.IsSet(fMasterPort) {
			local.MasterPort = c.Int(fMasterPort)
		}
	}
	if local.MasterPort < 0 || local.MasterPort > 65535 {
		return rendezvousChoice{}, fmt.Errorf("--master-port=%d: want 1..65535, or 0 for a free port", local.MasterPort)
	}
	round.RunID = cfg.RunID
	if local.MasterAddr != "" {
		round.MasterAddr = local.MasterAddr
	}
	round.MasterPort = local.MasterPort
	choice := rendezvousChoice{rdzv: rendezvous.NewLocal(local), round: round}
	if c.Bool(fStandalone) {
		choice.standalone = &local
	}
	return choice, nil
}

// elasticSetup asks for the etcd rendezvous (c10d, embedded, etcd); the
// round is what a dry run shows: the largest job, with this node's rank.
func elasticSetup(c *cli.Context, cfg *launcher.Config, backend string, conf map[string]string, minNodes, maxNodes int, round rendezvous.Round) (rendezvousChoice, error) {
	spec := &rendezvous.Spec{
		Backend: backend, Endpoint: c.String(fRdzvEndpoint), Conf: conf, RunID: cfg.RunID,
		MinNodes: minNodes, MaxNodes: maxNodes, NodeRank: -1, NprocPerNode: cfg.NprocPerNode,
		Role: cfg.Role, MaxRestarts: cfg.MaxRestarts, LocalAddr: c.String(fLocalAddr),
		ShowSetting: flagOf,
	}
	if c.IsSet(fNodeRank) {
		spec.NodeRank = c.Int(fNodeRank)
	}
	if spec.Endpoint == "" {
		return rendezvousChoice{}, fmt.Errorf("--rdzv-backend=%s needs --rdzv-endpoint (host:port of etcd, or where the embedded store runs)", backend)
	}
	// A dry run shows the largest job with this node's rank.
	rank := max(spec.NodeRank, 0)
	round.Place(min(rank, maxNodes-1), rendezvous.Uniform(maxNodes, cfg.NprocPerNode, cfg.Role))
	round.GroupRank = rank
	round.MasterAddr, round.MasterPort = "<node 0's address>", 0
	return rendezvousChoice{elastic: spec, round: round}, nil
}

// staticSetup is torchrun's static backend: a fixed number of nodes,
// ranks from --node-rank.
func staticSetup(c *cli.Context, cfg *launcher.Config, conf map[string]string, minNodes, maxNodes int) (rendezvousChoice, error) {
	var err error
	// The nodes' first meeting: gorun's join_timeout, or torchrun's static
	// key, timeout; other keys mean nothing to the static backend.
	var joinTimeout time.Duration
	for _, key := range []string{"join_timeout", "timeout"} {
		if v, ok := conf[key]; ok {
			if joinTimeout, err = flagval.Seconds(fRdzvConf+" "+key, v); err != nil {
				return rendezvousChoice{}, err
			}
			break
		}
	}
	if minNodes != maxNodes {
		return rendezvousChoice{}, fmt.Errorf("--nnodes=%s: the static backend needs a fixed number of nodes", c.String(fNnodes))
	}
	// torchrun: the static backend's store is at --rdzv-endpoint when one is
	// given, else at --master-addr:--master-port.
	addr, port := c.String(fMasterAddr), rendezvous.DefaultStaticPort
	if c.IsSet(fMasterPort) {
		port = c.Int(fMasterPort)
	}
	if ep := c.String(fRdzvEndpoint); ep != "" {
		if addr, port, err = rendezvous.SplitEndpoint(ep, port); err != nil {
			return rendezvousChoice{}, fmt.Errorf("--rdzv-endpoint: %w", err)
		}
	}
	st, err := rendezvous.NewStatic(rendezvous.StaticConfig{
		RunID: cfg.RunID, NNodes: maxNodes, NodeRank: c.Int(fNodeRank),
		MasterAddr: addr, MasterPort: port, MaxRestarts: cfg.MaxRestarts, JoinTimeout: joinTimeout,
		ShowSetting: flagOf,
	})
	if err != nil {
		return rendezvousChoice{}, err
	}
	return rendezvousChoice{rdzv: st, round: st.DryRunRound(rendezvous.Node{LocalWorldSize: cfg.NprocPerNode, Role: cfg.Role})}, nil
}

// rendezvousChoice is the backend a launch uses.
type rendezvousChoice struct {
	// rdzv is the backend, when it needs no etcd.
	rdzv launcher.Rendezvous
	// elastic, when set, asks for the etcd rendezvous instead.
	elastic *rendezvous.Spec
	// standalone, when set, asks for a single-node rendezvous with a
	// local store for the workers (--standalone), set up at launch.
	standalone *rendezvous.LocalConfig
	// round is the first round as --dry-run shows it (master port 0 when
	// it is chosen at launch).
	round rendezvous.Round
}

// selectRendezvous picks the backend for the command line. It also
// settles cfg.RunID.
func selectRendezvous(c *cli.Context, cfg *launcher.Config, log *logrus.Logger) (rendezvousChoice, error) {
	minNodes, maxNodes, err := flagval.ParseNNodes(c.String(fNnodes))
	if err != nil {
		return rendezvousChoice{}, err
	}
	conf, err := flagval.ParseKeyValues(fRdzvConf, c.String(fRdzvConf))
	if err != nil {
		return rendezvousChoice{}, err
	}
	backend := c.String(fRdzvBackend)
	kind, err := backendOf(backend, c.Bool(fStandalone), maxNodes)
	if err != nil {
		return rendezvousChoice{}, err
	}
	cfg.RunID = c.String(fRdzvID)
	// Before anything uses it: the run id names folders and store keys.
	if err := rendezvous.ValidateRunID(cfg.RunID); err != nil {
		return rendezvousChoice{}, err
	}
	// A node rank beyond the node count (an indexed Job's pod without
	// PET_NNODES) would run alone, pointed at node 0's store.
	if c.IsSet(fNodeRank) && !c.Bool(fStandalone) && c.Int(fNodeRank) >= maxNodes {
		return rendezvousChoice{}, fmt.Errorf("--node-rank=%d is not below --nnodes (%d): give --nnodes (PET_NNODES) the job's node count (on Kubernetes the pod count; the node rank may come from JOB_COMPLETION_INDEX: --dry-run shows where each value came from)", c.Int(fNodeRank), maxNodes)
	}
	round := rendezvous.Round{
		RunID: cfg.RunID, GroupWorldSize: 1, WorldSize: cfg.NprocPerNode, RoleWorldSize: cfg.NprocPerNode,
		MasterAddr: rendezvous.DefaultLocalAddr,
	}

	switch kind {
	case singleNodeBackend:
		// One node needs no store, whatever the backend: the fast path.
		return singleNodeSetup(c, cfg, round, maxNodes, log)
	case elasticBackend:
		return elasticSetup(c, cfg, backend, conf, minNodes, maxNodes, round)
	}
	return staticSetup(c, cfg, conf, minNodes, maxNodes)
}

// newRunID returns a random UUID, as torchrun --standalone uses for the run
// id. Linux serves one in /proc; elsewhere it is built from math/rand/v2,
// which is seeded randomly (a run id needs uniqueness, not secrecy).
func newRunID() (string, error) {
	if b, err := os.ReadFile("/proc/sys/kernel/random/uuid"); err == nil {
		return strings.TrimSpace(string(b)), nil
	}
	hi, lo := rand.Uint64(), rand.Uint64()
	hi = hi&^0xf000 | 0x4000     // version 4
	lo = lo&^(0xc<<60) | 0x8<<60 // RFC 4122 variant
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, hi>>16&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff), nil
}

// parseWorkerSignal reads --preempt-worker-signal: one signal, or none.
func parseWorkerSignal(v string) (syscall.Signal, error) {
	if strings.EqualFold(strings.TrimSpace(v), "none") || strings.TrimSpace(v) == "" {
		return 0, nil
	}
	sigs, err := flagval.ParseSignals(fPreemptWorkerSig, v)
	if err != nil {
		return 0, err
	}
	if len(sigs) != 1 || !workerenv.IsStopSignal(sigs[0]) {
		// The workers read it from GORUN_STOP_SIGNAL: a fault signal
		// (ABRT, SEGV, ...) crashes a Go worker, and makes Python's
		// faulthandler dump.
		return 0, fmt.Errorf("--%s=%q: want one signal a worker can be asked to stop with (%s) or none",
			fPreemptWorkerSig, v, strings.Join(workerenv.SignalNames(workerenv.IsStopSignal), ", "))
	}
	return sigs[0], nil
}

// typedName is the name of a flag as the command line spells it: alias
// where an argument is --alias (either spelling, or a prefix of it of 3
// letters or more), else name. An error then
// names what the user typed (torchrun 2.x's --shutdown-timeout is gorun's
// --stop-timeout).
func typedName(name, alias string) string {
	for _, a := range os.Args[1:] {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "--") {
			continue // a value, or the script and its arguments
		}
		flag, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
		flag = strings.ReplaceAll(flag, "_", "-")
		if len(flag) > 2 && strings.HasPrefix(alias, flag) {
			return alias
		}
	}
	return name
}
