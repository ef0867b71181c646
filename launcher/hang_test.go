package launcher

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"testing/synctest"
	"time"
)

// The hang clock, on synctest's fake time: output and heartbeats reset
// it, a worker is reported once, exited workers never.
func TestHangWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		hb := filepath.Join(t.TempDir(), "heartbeat")
		quiet, talker, beating := newProgress("", time.Now()), newProgress("", time.Now()), newProgress(hb, time.Now())
		h := newHangWatch(5*time.Second, []*progress{quiet, talker, beating})
		if got := h.interval(); got != 500*time.Millisecond {
			t.Errorf("interval %v", got)
		}
		running := func(int) bool { return true }
		var hung []int
		tick := time.NewTicker(h.interval())
		defer tick.Stop()
		for range 40 { // 20 s
			<-tick.C
			talker.saw(time.Now())
			if err := os.WriteFile(hb, nil, 0o644); err != nil { // touched now: fake time
				t.Fatal(err)
			}
			if err := os.Chtimes(hb, time.Now(), time.Now()); err != nil {
				t.Fatal(err)
			}
			hung = append(hung, h.check(time.Now(), running)...)
			if len(hung) > 0 && hung[0] == 0 && time.Since(time.Unix(0, quiet.last.Load())) < 5*time.Second {
				t.Fatal("reported before its timeout")
			}
		}
		if len(hung) != 1 || hung[0] != 0 {
			t.Errorf("hung %v; want only the quiet worker, once", hung)
		}
		h2 := newHangWatch(time.Second, []*progress{newProgress("", time.Now())})
		time.Sleep(2 * time.Second)
		if got := h2.check(time.Now(), func(int) bool { return false }); len(got) != 0 {
			t.Errorf("an exited worker was reported hung: %v", got)
		}
	})
}

func TestEvidenceSignal(t *testing.T) {
	self, err := os.Executable() // a Go test binary
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		e    Entrypoint
		want syscall.Signal
	}{
		{Entrypoint{Script: "train.py"}, syscall.SIGABRT},
		{Entrypoint{Script: "pkg.train", Module: true}, syscall.SIGABRT},
		{Entrypoint{Script: "/usr/bin/python3", NoPython: true}, syscall.SIGABRT},
		{Entrypoint{Script: self, NoPython: true}, syscall.SIGQUIT},
		{Entrypoint{Script: "/bin/sh", NoPython: true}, 0},
	} {
		if got := evidenceSignal(c.e); got != c.want {
			t.Errorf("%+v: %v; want %v", c.e, got, c.want)
		}
	}
}
