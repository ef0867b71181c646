package jobstore

import (
	"strings"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// harmlessEtcdLine reports whether msg is one of etcd's log lines that
// say nothing true of the store gorun runs, yet read as trouble to
// someone who sees them at the default level (warn): gorun's own client
// port sits in front of etcd's single port; a simple auth token reaches
// only the one member that made it, over the job's TLS; and the storage
// version is written once the first term is known, etcd retrying until
// then; and a new store's first election waits for its own bootstrap
// configuration to be applied (raft retries the campaign at once).
func harmlessEtcdLine(msg string) bool {
	if strings.HasSuffix(msg, " cannot campaign at term 1 since there are still pending configuration changes to apply") {
		return true
	}
	switch msg {
	case "Running http and grpc server on single port. This is not recommended for production.",
		"simple token is not cryptographically signed",
		"Failed to detect schema version",
		"failed to update storage version":
		return true
	}
	return false
}

// quietCore drops etcd's harmless lines; everything else goes to its Core.
type quietCore struct{ zapcore.Core }

// Check drops a harmless line and asks the wrapped core about the rest.
func (c quietCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if harmlessEtcdLine(e.Message) {
		return ce
	}
	return c.Core.Check(e, ce)
}

// With keeps the filter on a child core.
func (c quietCore) With(fields []zapcore.Field) zapcore.Core {
	return quietCore{c.Core.With(fields)}
}

// quietEtcdLogs is the zap option that drops etcd's harmless lines.
func quietEtcdLogs() zap.Option {
	return zap.WrapCore(func(c zapcore.Core) zapcore.Core { return quietCore{c} })
}
