package slurmtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func testParams(opts Options) confParams {
	return confParams{cluster: "gslabc", dir: "/tmp/gslx", ctlName: "gslabc-ctl", ctlAddr: "10.1.2.254",
		nodes: []string{"gslabc-n0", "gslabc-n1"}, addrs: []string{"10.1.2.1", "10.1.2.2"}, ctlPort: 1234, nodePort: 1235,
		hardware: "CPUs=2 Boards=1", gpus: 4, opts: opts}
}

// TestSlurmConf: KillWait is Slurm's default unless asked for; GraceTime
// goes to the preempted partition; the rest is what the harness relies on.
func TestSlurmConf(t *testing.T) {
	conf := slurmConf(testParams(Options{}))
	for _, want := range []string{
		"ClusterName=gslabc\n", "SlurmctldHost=gslabc-ctl(10.1.2.254)\n", "SlurmctldPort=1234\n", "SlurmdPort=1235\n",
		"AuthInfo=socket=/tmp/gslx/munge/munge.socket\n", "SlurmdSpoolDir=/tmp/gslx/spool/%n\n",
		"ProctrackType=proctrack/linuxproc\n", "TaskPlugin=task/none\n", "SelectType=select/cons_tres\n",
		"GresTypes=gpu\n", "PreemptType=preempt/partition_prio\n", "PreemptMode=CANCEL\n",
		"NodeName=DEFAULT CPUs=2 Boards=1 Gres=gpu:4 State=UNKNOWN\n",
		"NodeName=gslabc-n1 NodeHostname=gslabc-n1 NodeAddr=10.1.2.2\n",
		"PartitionName=low Nodes=ALL Default=YES PriorityTier=1 MaxTime=INFINITE State=UP\n",
		"PartitionName=high Nodes=ALL Default=NO PriorityTier=10 MaxTime=INFINITE State=UP\n",
	} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	if strings.Contains(conf, "KillWait") || strings.Contains(conf, "GraceTime") {
		t.Errorf("KillWait or GraceTime set by default:\n%s", conf)
	}
	conf = slurmConf(testParams(Options{KillWait: 2 * time.Second, GraceTime: 1500 * time.Millisecond, CredExpire: 30 * time.Second, ExtraConf: []string{"DebugFlags=Gres"}}))
	for _, want := range []string{"\nKillWait=2\n", " State=UP GraceTime=2\n", "\nDebugFlags=Gres\n", "\nAuthInfo=socket=/tmp/gslx/munge/munge.socket,cred_expire=30\n"} {
		if !strings.Contains(conf, want) {
			t.Errorf("slurm.conf lacks %q:\n%s", want, conf)
		}
	}
	if got, want := gresConf("/tmp/gslx", 4), "Name=gpu File=/tmp/gslx/dev/gpu[0-3]\n"; got != want {
		t.Errorf("gres.conf %q, want %q", got, want)
	}
}

func TestHardwareLine(t *testing.T) {
	got, err := hardwareLine("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105\nUpTime=0-00:03:14\n")
	if want := "CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"; err != nil || got != want {
		t.Fatalf("%q, %v; want %q", got, err, want)
	}
	if _, err := hardwareLine("slurmd: error: something\n"); err == nil {
		t.Fatal("no error for a line without CPUs=")
	}
}

// TestHostsBlock: blocks of several clusters come and go without touching
// each other or the lines that were there.
func TestHostsBlock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	orig := "127.0.0.1 localhost\n10.0.0.1 other # keep"
	if err := os.WriteFile(path, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() string {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(data)
	}
	if err := addHostsBlock(path, "gsla", [][2]string{{"10.1.1.1", "gsla-n0"}}); err != nil {
		t.Fatal(err)
	}
	if err := addHostsBlock(path, "gslb", [][2]string{{"10.2.2.1", "gslb-n0"}, {"10.2.2.2", "gslb-n1"}}); err != nil {
		t.Fatal(err)
	}
	want := orig + "\n# BEGIN gorun slurmtest gsla\n10.1.1.1 gsla-n0\n# END gorun slurmtest gsla\n" +
		"# BEGIN gorun slurmtest gslb\n10.2.2.1 gslb-n0\n10.2.2.2 gslb-n1\n# END gorun slurmtest gslb\n"
	if got := read(); got != want {
		t.Fatalf("after two blocks:\n%s\nwant:\n%s", got, want)
	}
	for range 2 { // removing twice is removing once
		if err := removeHostsBlock(path, "gsla"); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeHostsBlock(path, "gslb"); err != nil {
		t.Fatal(err)
	}
	if got := read(); got != orig+"\n" {
		t.Fatalf("after removing both: %q, want %q", got, orig+"\n")
	}
	// A begin marker without its end: nothing is removed.
	broken := orig + "\n# BEGIN gorun slurmtest gslc\n10.3.3.1 gslc-n0\n"
	if err := os.WriteFile(path, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := removeHostsBlock(path, "gslc"); err == nil || read() != broken {
		t.Fatalf("a block without its end: %v, file %q", err, read())
	}
}
