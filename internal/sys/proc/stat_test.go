package proc

import (
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"
)

func TestCPUTimeGrowsWithWork(t *testing.T) {
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the kernel's 10 ms ticks show it.
	deadline := time.Now().Add(10 * time.Second)
	for x := 0; time.Now().Before(deadline); x++ {
		after, err := CPUTime(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			return
		}
	}
	t.Fatal("10 s of spinning added no CPU time")
}

func TestCPUTimeOfAMissingProcess(t *testing.T) {
	if _, err := CPUTime(1 << 30); err == nil {
		t.Fatal("no error for a pid that cannot exist")
	}
}

func TestCatches(t *testing.T) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGUSR2)
	defer signal.Stop(ch)
	for _, tc := range []struct {
		sig  syscall.Signal
		want bool
	}{{syscall.SIGUSR2, true}, {syscall.SIGKILL, false}, {0, false}} {
		got, err := Catches(os.Getpid(), tc.sig)
		if err != nil {
			t.Fatal(err)
		}
		if got != tc.want {
			t.Errorf("Catches(%v) = %v, want %v", tc.sig, got, tc.want)
		}
	}
}
