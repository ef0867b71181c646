package launcher

import (
	"errors"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
)

// TestValidateNamesTheSetting: a field out of range is bad input that
// names the field, in the launcher's terms (the command line puts the
// flag in).
func TestValidateNamesTheSetting(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		set  func(*Config)
		want setting.Name
		msg  string
	}{
		{func(c *Config) { c.Entrypoint.Module, c.Entrypoint.NoPython = true, true }, "Entrypoint.NoPython", "Entrypoint.NoPython and Entrypoint.Module cannot be used together"},
		{func(c *Config) { c.Entrypoint.Python = nil }, "Entrypoint.Python", "Entrypoint.Python: empty interpreter"},
		{func(c *Config) { c.NprocPerNode = 0 }, "NprocPerNode", "NprocPerNode: 0 workers, want at least 1"},
		{func(c *Config) { c.RunID = "a/b" }, "RunID", `invalid run id: RunID="a/b": character '/' at 1; a run id names a folder and store keys: anything but '/' and control characters`},
		{func(c *Config) { c.MaxRestarts = -1 }, "MaxRestarts", "MaxRestarts: -1, want 0 or more"},
		{func(c *Config) { c.RestartBackoff = 2 * time.Minute; c.RestartBackoffMax = time.Minute }, "RestartBackoffMax", "RestartBackoffMax: 1m0s is below RestartBackoff 2m0s"},
		{func(c *Config) { c.HangTimeout = -time.Second }, "HangTimeout", "HangTimeout: -1s, want 0 (off) or more"},
		{func(c *Config) { c.WarmImports = []string{"torch"} }, "WarmImports", "WarmImports torch: the modules are imported by WarmStart's interpreters: add WarmStart"},
		{func(c *Config) { c.LocalRanksFilter = []int{-1} }, "LocalRanksFilter", "LocalRanksFilter: local rank -1; want local ranks from 0"},
	} {
		t.Run(string(tt.want), func(t *testing.T) {
			cfg := NewConfig()
			cfg.Entrypoint.Script = "train.py"
			tt.set(&cfg)
			err := cfg.Validate()
			var bad *setting.Error
			if !errors.As(err, &bad) || bad.Setting != tt.want || err.Error() != tt.msg {
				t.Errorf("Validate = %v; want %q, about %s", err, tt.msg, tt.want)
			}
		})
	}
}
