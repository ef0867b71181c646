package jobstore

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/proctest"

	"github.com/sirupsen/logrus"

	"github.com/gorun-dev/gorun/internal/sys/tempdir"
)

// TestMemberRestartedWhateverItsExit: a store member that served and then
// exited with an error (etcd's exit when it runs out of descriptors) is
// started again, as one killed by a signal is; one whose place was given
// away (MemberTakenExit) is not. It used to be restarted only after a
// signal, and a flood that made two members exit left no majority.
func TestMemberRestartedWhateverItsExit(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name      string
		firstExit string
		restarted bool
	}{
		{"exit 1", "exit 1", true},
		{"killed", "kill -9 $$", true},
		{"place taken", "exit 3", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			starts := filepath.Join(dir, "starts")
			// A member that serves (its line), then ends as the case says on
			// its first start and serves until its stdin closes on the next.
			script := filepath.Join(dir, "member.sh")
			body := "#!/bin/sh\nread token\necho x >> " + starts + "\necho 'gorun store: member 0 of 3 serving'\n" +
				"if [ $(wc -l < " + starts + ") = 1 ]; then " + tt.firstExit + "; fi\ncat > /dev/null\n"
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			tmp, err := tempdir.New("member-test")
			if err != nil {
				t.Fatal(err)
			}
			log := logrus.New()
			logged := &proctest.Buffer{}
			log.SetOutput(logged)
			m := &MemberProcess{argv: []string{script, "store", "--listen", "127.0.0.1:1"}, token: []byte("0123456789abcdef0123"),
				dir: tmp, log: log, stderr: io.Discard, stop: make(chan struct{}), done: make(chan struct{})}
			ready := make(chan error, 1)
			go m.supervise(ready)
			defer m.Close()
			if err := <-ready; err != nil {
				t.Fatal(err)
			}
			deadline := time.After(30 * time.Second)
			poll := time.NewTicker(10 * time.Millisecond)
			defer poll.Stop()
			for {
				b, _ := os.ReadFile(starts)
				n := strings.Count(string(b), "x")
				if tt.restarted && n >= 2 {
					return
				}
				if !tt.restarted {
					select {
					case <-m.done:
						if n != 1 {
							t.Errorf("%d starts; want 1", n)
						}
						return
					default:
					}
				}
				select {
				case <-deadline:
					t.Fatalf("%d starts after 30s (restarted: want %v); log:\n%s", n, tt.restarted, logged.String())
				case <-poll.C:
				}
			}
		})
	}
}
