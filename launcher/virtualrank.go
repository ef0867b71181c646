package launcher

import (
	"strconv"
	"strings"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// VisibleDevice is the one GPU a worker sees with --virtual-local-rank, as
// torchrun 2.x gives it: the local rank's entry of the launcher's
// HIP_VISIBLE_DEVICES (ROCm, which takes precedence), else of its
// CUDA_VISIBLE_DEVICES, else the local rank itself. hip says whether
// HIP_VISIBLE_DEVICES is set too. A local rank beyond the list is an
// error that names the variable.
func VisibleDevice(environ []string, localRank int) (device string, hip bool, err error) {
	name := "HIP_VISIBLE_DEVICES"
	list, _ := lookupEnv(environ, name)
	hip = list != ""
	if !hip {
		name = "CUDA_VISIBLE_DEVICES"
		var set bool
		if list, set = lookupEnv(environ, name); !set {
			return strconv.Itoa(localRank), false, nil
		}
	}
	devices := strings.Split(list, ",")
	if localRank >= len(devices) {
		return "", false, setting.Errorf("%s: local rank %d has no GPU in %s=%q (%d listed); want %s at most %d", setting.Name("VirtualLocalRank"), localRank, name, list, len(devices), setting.Name("NprocPerNode"), len(devices))
	}
	return strings.TrimSpace(devices[localRank]), hip, nil
}

// virtualRankEnv replaces LOCAL_RANK by 0 in vars and adds the worker's
// one visible GPU (VisibleDevice).
func virtualRankEnv(cfg *Config, vars []EnvVar, localRank int) ([]EnvVar, error) {
	device, hip, err := VisibleDevice(cfg.Environ, localRank)
	if err != nil {
		return nil, err
	}
	for i := range vars {
		if vars[i].Name == workerenv.LocalRank {
			vars[i].Value = "0"
		}
	}
	vars = append(vars, EnvVar{"CUDA_VISIBLE_DEVICES", device})
	if hip {
		vars = append(vars, EnvVar{"HIP_VISIBLE_DEVICES", device})
	}
	return vars, nil
}
