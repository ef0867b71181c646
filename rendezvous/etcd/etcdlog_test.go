package etcd

import (
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

func TestQuietEtcdLogs(t *testing.T) {
	core, logs := observer.New(zap.WarnLevel)
	log := zap.New(core, quietEtcdLogs()).With(zap.String("member", "0"))
	for _, line := range []string{
		"Running http and grpc server on single port. This is not recommended for production.",
		"simple token is not cryptographically signed",
		"Failed to detect schema version",
		"failed to update storage version",
	} {
		log.Warn(line)
		log.Error(line)
	}
	log.Warn("a real warning")
	log.Error("failed to purge snap file")
	got := logs.All()
	if len(got) != 2 || got[0].Message != "a real warning" || got[1].Message != "failed to purge snap file" {
		t.Errorf("logged %+v; want only the two lines that are not harmless", got)
	}
}
