package launcher

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/launcher/goodput"

	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/launcher/probe"
	"github.com/gorun-dev/gorun/memory"
	"github.com/gorun-dev/gorun/rendezvous"
)

// Names of the memory defaults gorun adds (docs/sources.md, memory tuning).
const (
	// EnvReuseMode selects the multi-stream memory reuse mode, 0..3.
	EnvReuseMode = memory.ReuseEnv
	// DefaultReuseMode is the reuse mode gorun sets when unset.
	DefaultReuseMode = "2"
	// expandableSegments is the allocator option gorun adds.
	expandableSegments = "expandable_segments:True"
	// ncclUBFlag is Megatron's NCCL user buffer registration flag, which
	// cannot be combined with expandable segments.
	ncclUBFlag = "--use-nccl-ub"
)

// EnvVar is one variable that gorun sets for a worker.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// lookupEnv returns the value of name in environ; the last entry wins, as
// in os/exec.
func lookupEnv(environ []string, name string) (string, bool) {
	for i := len(environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(environ[i], "="); ok && k == name {
			return v, true
		}
	}
	return "", false
}

// isLauncherSecret says whether the launcher's variable name holds the
// job's token or a store password: the workers never get those (they get
// GORUN_JOB_SECRET, derived from the token for them alone).
func isLauncherSecret(name string) bool {
	switch name {
	case rendezvous.TokenEnv, rendezvous.TokenFileEnv, rendezvous.PasswordEnv, workerenv.StorePassword:
		return true
	}
	return false
}

// rdzvConfVars hold --rdzv-conf as the environment gives it (torchrun's
// PET_ spelling and gorun's own): a password= in them is a launcher
// secret too.
var rdzvConfVars = []string{"PET_RDZV_CONF", "GORUN_RDZV_CONF"}

// withoutSecrets is environ without the launcher's secrets: the secret
// variables are left out, and a password= pair is taken out of the
// --rdzv-conf variables (their other settings stay).
func withoutSecrets(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case isLauncherSecret(k):
		case slices.Contains(rdzvConfVars, k):
			out = append(out, k+"="+withoutPassword(v))
		default:
			out = append(out, kv)
		}
	}
	return out
}

// withoutPassword is a k1=v1,k2=v2 list without its password pairs.
func withoutPassword(conf string) string {
	pairs := strings.Split(conf, ",")
	kept := pairs[:0]
	for _, p := range pairs {
		if k, _, _ := strings.Cut(p, "="); strings.TrimSpace(k) != "password" {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, ",")
}

// withEnv returns environ with vars set, replacing earlier entries of the
// same names.
func withEnv(environ []string, vars []EnvVar) []string {
	set := make(map[string]bool, len(vars))
	for _, v := range vars {
		set[v.Name] = true
	}
	out := make([]string, 0, len(environ)+len(vars))
	for _, kv := range environ {
		if k, _, _ := strings.Cut(kv, "="); !set[k] {
			out = append(out, kv)
		}
	}
	for _, v := range vars {
		out = append(out, v.Name+"="+v.Value)
	}
	return out
}

// SharedEnv returns the variables every worker of the node gets whatever
// its rank, beyond torchrun's per-rank ones: OMP_NUM_THREADS=1 when unset
// and more than one worker runs (torchrun's rule), and the memory defaults
// of docs/sources.md (memory tuning) unless disabled. The warnings say what the user should know
// about these choices, once per job.
func SharedEnv(cfg *Config) (vars []EnvVar, warnings []string) {
	if _, set := lookupEnv(cfg.Environ, workerenv.OMPNumThreads); !set && cfg.NprocPerNode > 1 {
		vars = append(vars, EnvVar{workerenv.OMPNumThreads, "1"})
		warnings = append(warnings, "setting OMP_NUM_THREADS=1 for each worker, as torchrun does, to avoid overloading the system; set it yourself to tune it for your application")
	}
	// gorun reads the workers' output through pipes, where Python
	// block-buffers stdout: the lines a program printed before it raised
	// would come after its traceback (on a terminal, which torchrun
	// without redirects hands its workers, stdout is line-buffered).
	// gorun runs Python scripts with -u, as torchrun does; other programs
	// (--no-python: a python command, a shell script) get the same
	// through the environment, unless the user set it.
	if _, set := lookupEnv(cfg.Environ, "PYTHONUNBUFFERED"); !set && cfg.Entrypoint.NoPython && !cfg.Entrypoint.RunPath {
		vars = append(vars, EnvVar{"PYTHONUNBUFFERED", "1"})
	}
	// With --hang-timeout, Python prints every thread's traceback on the
	// SIGABRT that gorun sends a hung worker.
	if _, set := lookupEnv(cfg.Environ, "PYTHONFAULTHANDLER"); !set && cfg.HangTimeout > 0 {
		vars = append(vars, EnvVar{"PYTHONFAULTHANDLER", "1"})
	}
	// torchrun passes the launcher's value or "1". torch 1.x reads only
	// the older name, which torchrun 1.13 set; 2.x reads the TORCH_ one
	// and warns on every rank where the older one is set, so that is set
	// only where the workers' torch is found to be 1.x (TorchMajor).
	errorHandling := []string{workerenv.NCCLAsyncErrorHandling}
	if !cfg.Entrypoint.NoPython && len(cfg.Entrypoint.Python) > 0 {
		if major, ok := TorchMajor(cfg.Entrypoint.Python[0], cfg.Environ); ok && major < 2 {
			errorHandling = append(errorHandling, workerenv.NCCLAsyncErrorHandlingOld)
		}
	}
	for _, name := range errorHandling {
		if _, set := lookupEnv(cfg.Environ, name); !set {
			vars = append(vars, EnvVar{name, "1"})
		}
	}
	if cfg.probes() {
		vars = append(vars, EnvVar{workerenv.ProbeInterval, strconv.FormatFloat(probe.Interval(cfg.HangTimeout).Seconds(), 'f', -1, 64)})
		// PyTorch 2.x's flight recorder, which the probe reads (gloo's
		// too), unless the user sized it.
		_, fr := lookupEnv(cfg.Environ, workerenv.FlightRecorderSize)
		_, nccl := lookupEnv(cfg.Environ, workerenv.NCCLTraceBufferSize)
		if !fr && !nccl {
			vars = append(vars, EnvVar{workerenv.FlightRecorderSize, strconv.Itoa(probe.RecorderSize)})
		}
	}
	// torchrun 2.x puts its --signals-to-handle in its own environment,
	// which its workers inherit.
	vars = append(vars, EnvVar{workerenv.SignalsToHandle, signalList(cfg.StopSignals)})
	if !cfg.MemoryDefaults {
		return vars, warnings
	}
	// The user's configuration, under either name: the CUDA name wins
	// where both are set, as in torch.
	var name, cur string
	var set bool
	// torch reads the CUDA name first, then ROCm's, then the generic one.
	for _, name = range []string{workerenv.AllocConf, workerenv.AllocConfHIP, workerenv.AllocConfAny} {
		if cur, set = lookupEnv(cfg.Environ, name); set {
			break
		}
	}
	switch {
	case slices.Contains(cfg.Entrypoint.Args, ncclUBFlag):
		warnings = append(warnings, "not adding expandable_segments:True to "+workerenv.AllocConf+": the script's "+ncclUBFlag+" (NCCL user buffer registration) does not work with expandable segments")
	case !set:
		vars = append(vars, EnvVar{workerenv.AllocConf, expandableSegments})
	case strings.TrimSpace(cur) == "", strings.Contains(cur, "cudaMallocAsync"):
		// Set empty on purpose, or the CUDA allocator, which has no
		// expandable segments: nothing to advise.
	case !choosesExpandable(cur):
		// The user's value is kept as it is.
		warnings = append(warnings, fmt.Sprintf("keeping your %s=%s as it is; gorun's default would add %s (less fragmentation), which you may add yourself", name, cur, expandableSegments))
	}
	if _, set := lookupEnv(cfg.Environ, EnvReuseMode); !set {
		vars = append(vars, EnvVar{EnvReuseMode, DefaultReuseMode})
	}
	return vars, warnings
}

// choosesExpandable says whether a PYTORCH_CUDA_ALLOC_CONF value sets
// expandable_segments (either way).
func choosesExpandable(conf string) bool {
	for _, opt := range strings.Split(conf, ",") {
		if k, _, _ := strings.Cut(opt, ":"); strings.TrimSpace(k) == "expandable_segments" {
			return true
		}
	}
	return false
}

// rankEnv returns torchrun's per-worker variables (docs/sources.md, torchrun),
// and gorun's own that depend on the round: the job secret (which
// replaces any GORUN_JOB_SECRET of the launcher's environment) and the
// store's address.
func rankEnv(cfg *Config, round rendezvous.Round, restartCount, localRank int, errorFile string) []EnvVar {
	itoa := strconv.Itoa
	vars := []EnvVar{
		{workerenv.LocalRank, itoa(localRank)},
		{workerenv.Rank, itoa(round.BaseRank + localRank)},
		{workerenv.GroupRank, itoa(round.GroupRank)},
		{workerenv.RoleRank, itoa(round.BaseRoleRank + localRank)},
		{workerenv.RoleName, cfg.Role},
		{workerenv.LocalWorldSize, itoa(cfg.NprocPerNode)},
		{workerenv.WorldSize, itoa(round.WorldSize)},
		{workerenv.GroupWorldSize, itoa(round.GroupWorldSize)},
		{workerenv.RoleWorldSize, itoa(round.RoleWorldSize)},
		{workerenv.MasterAddr, round.MasterAddr},
		{workerenv.MasterPort, itoa(round.MasterPort)},
		{workerenv.RestartCount, itoa(restartCount)},
		{workerenv.MaxRestarts, itoa(cfg.MaxRestarts)},
		{workerenv.RunID, round.RunID},
		{workerenv.UseAgentStore, pythonBool(round.UseAgentStore)},
		{workerenv.ErrorFile, errorFile},
	}
	if cfg.HangTimeout > 0 {
		vars = append(vars, EnvVar{workerenv.HeartbeatFile, filepath.Join(filepath.Dir(errorFile), "heartbeat")})
	}
	vars = append(vars, EnvVar{workerenv.ProgressFile, filepath.Join(filepath.Dir(errorFile), goodput.ProgressFile)})
	if cfg.probes() {
		vars = append(vars,
			EnvVar{workerenv.ProbeFile, filepath.Join(filepath.Dir(errorFile), probe.SnapshotFile)},
			EnvVar{workerenv.ProbeRequest, filepath.Join(filepath.Dir(filepath.Dir(errorFile)), probe.RequestFile)})
	}
	if len(round.JobSecret) > 0 {
		vars = append(vars, EnvVar{workerenv.JobSecret, string(round.JobSecret)})
	}
	if len(round.StoreEndpoints) > 0 {
		vars = append(vars,
			EnvVar{workerenv.StoreEndpoints, strings.Join(round.StoreEndpoints, ",")},
			EnvVar{workerenv.StorePrefix, round.StorePrefix})
		if round.StoreUser != "" {
			vars = append(vars, EnvVar{workerenv.StoreUser, round.StoreUser}, EnvVar{workerenv.StorePassword, round.StorePassword})
		}
	}
	return vars
}

// pythonBool spells b as Python's str(bool) does, which is what torchrun
// writes and what torch's env:// initialisation compares with.
func pythonBool(b bool) string {
	if b {
		return "True"
	}
	return "False"
}
