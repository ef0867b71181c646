package launcher

import (
	"fmt"

	"github.com/gorun-dev/gorun/internal/secret"
	"github.com/gorun-dev/gorun/internal/workerenv"
)

// How the job secret is shown.
const (
	// SecretPlaceholder stands for the secret wherever it is shown: a
	// dry run's environment, a formatted Secret.
	SecretPlaceholder = secret.Placeholder
)

// NewSecret returns a fresh job secret (gorun's one secret type,
// secret.Secret, which never prints itself): 32 random bytes,
// hex-encoded (64 characters).
func NewSecret() (secret.Secret, error) {
	s, err := secret.New()
	if err != nil {
		return nil, fmt.Errorf("job secret: %w", err)
	}
	return s, nil
}

// secretWarnings tells the user that a GORUN_JOB_SECRET of gorun's own
// environment is not passed on: a secret is the job's, not the user's.
func secretWarnings(cfg *Config) []string {
	if _, set := lookupEnv(cfg.Environ, workerenv.JobSecret); set {
		return []string{workerenv.JobSecret + " in gorun's environment is ignored: every job gets its own secret (the rendezvous's, or one gorun makes)"}
	}
	return nil
}
