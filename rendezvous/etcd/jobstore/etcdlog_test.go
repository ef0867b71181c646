package jobstore

import (
	"strings"
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
		"679f341f9819b8e3 cannot campaign at term 1 since there are still pending configuration changes to apply",
	} {
		log.Warn(line)
		log.Error(line)
	}
	log.Warn("a real warning")
	log.Error("failed to purge snap file")
	log.Warn("679f341f9819b8e3 cannot campaign at term 7 since there are still pending configuration changes to apply")
	got := logs.All()
	if len(got) != 3 || got[0].Message != "a real warning" || got[1].Message != "failed to purge snap file" || !strings.Contains(got[2].Message, "term 7") {
		t.Errorf("logged %+v; want only the three lines that are not harmless (a campaign held up after term 1 is news)", got)
	}
}
