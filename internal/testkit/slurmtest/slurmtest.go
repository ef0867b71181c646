// Package slurmtest runs a real Slurm cluster for a test: its own munged,
// a slurmctld, and a slurmd on each of three hosts that are Linux network
// namespaces on one bridge, each with its own address and host name
// (resolvable through a marked block in /etc/hosts). It uses Debian's
// slurm-wlm and munge and needs root; Start skips the test loudly where
// they are missing, and fails it instead with GORUN_REQUIRE_SLURM=1.
//
// Everything is removed when the test ends: jobs, daemons, every process
// started in the hosts, the namespaces, the /etc/hosts block and the
// cluster's folder.
package slurmtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorun-dev/gorun/internal/testkit/nettest"
	"github.com/gorun-dev/gorun/internal/testkit/proctest"
)

// Options change a cluster; the zero value is the default cluster.
type Options struct {
	// Nodes is the number of hosts (default 3).
	Nodes int
	// GPUs is the number of fake GPUs per node (default 4).
	GPUs int
	// KillWait is the time between SIGTERM and SIGKILL when a job ends;
	// 0 leaves Slurm's default (30 s).
	KillWait time.Duration
	// GraceTime is the preempted partition's (PartitionLow) grace time:
	// how long a preempted job has after its SIGTERM before it is
	// cancelled; 0 is Slurm's default (none).
	GraceTime time.Duration
	// MessageTimeout is Slurm's round-trip limit (default 5 s; Slurm's own
	// is 10 s).
	MessageTimeout time.Duration
	// SlurmdTimeout is how long a node may not answer before it is DOWN
	// (default 30 s; Slurm's own is 300 s).
	SlurmdTimeout time.Duration
	// CredExpire is the job step credential's lifetime, which is also
	// how long Slurm holds a requeued job before it may run again; 0
	// leaves Slurm's default (120 s).
	CredExpire time.Duration
	// ExtraConf are lines added at the end of slurm.conf.
	ExtraConf []string
}

// Cluster is a running Slurm cluster; see Start.
type Cluster struct {
	t       testing.TB
	name    string // ClusterName and the prefix of every host name
	dir     string
	conf    string // slurm.conf's path
	root    string // the repository's root
	bins    map[string]string
	hosts   *nettest.Hosts
	nodes   []string
	ctlName string
	munged  *daemon
	ctld    *daemon
	slurmds []*daemon
	marks   marks
}

// unavailable skips the test, saying why, or fails it where
// GORUN_REQUIRE_SLURM=1 says Slurm must be there.
func unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("GORUN_REQUIRE_SLURM") == "1" {
		t.Fatalf("GORUN_REQUIRE_SLURM=1, but the Slurm cluster cannot run: %s", msg)
	}
	t.Skipf("SKIPPED: no Slurm test cluster: %s", msg)
}

// requireTB turns nettest's skips into unavailable: a machine that cannot
// make namespaces fails the test where Slurm is required.
type requireTB struct{ testing.TB }

// Skip is unavailable.
func (r requireTB) Skip(args ...any) { r.TB.Helper(); unavailable(r.TB, "%s", fmt.Sprint(args...)) }

// Skipf is unavailable.
func (r requireTB) Skipf(format string, args ...any) {
	r.TB.Helper()
	unavailable(r.TB, format, args...)
}

// SkipNow is unavailable.
func (r requireTB) SkipNow() { r.TB.Helper(); unavailable(r.TB, "skipped") }

// Start runs a cluster for t and returns once every node is idle; the
// cluster is removed when t ends.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if os.Geteuid() != 0 {
		unavailable(t, "needs root (network namespaces, /etc/hosts, slurmd)")
	}
	bins := map[string]string{}
	var missing []string
	for _, name := range []string{"ip", "nsenter", "unshare", "hostname", "munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue", "sinfo", "scontrol"} {
		p, err := exec.LookPath(name)
		if err != nil {
			if _, serr := os.Stat("/usr/sbin/" + name); serr == nil {
				p, err = "/usr/sbin/"+name, nil
			}
		}
		if err != nil {
			missing = append(missing, name)
		}
		bins[name] = p
	}
	if len(missing) > 0 {
		unavailable(t, "missing %s (Debian: apt-get install slurm-wlm munge iproute2 util-linux)", strings.Join(missing, ", "))
	}
	if opts.Nodes <= 0 {
		opts.Nodes = 3
	}
	if opts.GPUs <= 0 {
		opts.GPUs = 4
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 3)
	if _, err := rand.Read(id); err != nil {
		t.Fatal(err)
	}
	// A short folder of its own rather than t.TempDir: munged's socket
	// path must fit in 108 bytes whatever the test's name.
	dir, err := os.MkdirTemp("", "gsl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the cluster's folder: %v", err)
		}
	})
	c := &Cluster{t: t, name: "gsl" + hex.EncodeToString(id), dir: dir, conf: filepath.Join(dir, "slurm.conf"), root: root, bins: bins}
	c.ctlName = c.name + "-ctl"
	for i := range opts.Nodes {
		c.nodes = append(c.nodes, fmt.Sprintf("%s-n%d", c.name, i))
	}
	c.hosts = nettest.NewHosts(requireTB{t}, opts.Nodes)
	c.marks = marks{namespaces: map[string]bool{}, env: []byte("SLURM_CONF=" + c.conf)}
	for i := range opts.Nodes {
		c.marks.addLink(netnsLink(c.hosts.Namespace(i)))
	}
	if out, err := exec.Command(bins["unshare"], "--uts", "true").CombinedOutput(); err != nil {
		unavailable(t, "cannot make a UTS namespace (unshare --uts): %v: %s", err, out)
	}

	entries := [][2]string{{c.ctlAddr(), c.ctlName}}
	for i, n := range c.nodes {
		entries = append(entries, [2]string{c.Addr(i), n})
	}
	if err := addHostsBlock(hostsFile, c.name, entries); err != nil {
		t.Fatalf("add the cluster's names to %s: %v", hostsFile, err)
	}
	t.Cleanup(func() {
		if err := removeHostsBlock(hostsFile, c.name); err != nil {
			t.Errorf("remove the cluster's names from %s: %v", hostsFile, err)
		}
	})
	t.Cleanup(c.stop)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	if err := c.setUp(ctx, opts); err != nil {
		t.Fatalf("slurm test cluster %s: %v", c.name, err) // stop logs the daemons' logs
	}
	return c
}

// setUp writes the configuration, then starts munged, slurmctld and the
// slurmds and waits until every node is idle.
func (c *Cluster) setUp(ctx context.Context, opts Options) error {
	if err := os.Chmod(c.dir, 0o755); err != nil { // job steps run in it
		return err
	}
	for _, d := range []string{"munge", "state", "run", "log", "dev", "work"} {
		if err := os.MkdirAll(filepath.Join(c.dir, d), 0o755); err != nil {
			return err
		}
	}
	for _, n := range c.nodes {
		if err := os.MkdirAll(filepath.Join(c.dir, "spool", n), 0o755); err != nil {
			return err
		}
	}
	for i := range opts.GPUs {
		if err := mknodNull(filepath.Join(c.dir, "dev", fmt.Sprintf("gpu%d", i))); err != nil {
			return fmt.Errorf("fake GPU device: %w", err)
		}
	}
	hwOut, err := exec.Command(c.bins["slurmd"], "-C").CombinedOutput()
	if err != nil {
		return fmt.Errorf("slurmd -C: %v: %s", err, hwOut)
	}
	hw, err := hardwareLine(string(hwOut))
	if err != nil {
		return err
	}
	ctlPort, err := proctest.PickPort("")
	if err != nil {
		return err
	}
	nodePort := ctlPort
	for nodePort == ctlPort {
		if nodePort, err = proctest.PickPort(""); err != nil {
			return err
		}
	}
	addrs := make([]string, len(c.nodes))
	for i := range c.nodes {
		addrs[i] = c.Addr(i)
	}
	p := confParams{cluster: c.name, dir: c.dir, ctlName: c.ctlName, ctlAddr: c.ctlAddr(), nodes: c.nodes, addrs: addrs,
		ctlPort: ctlPort, nodePort: nodePort, hardware: hw, gpus: opts.GPUs, opts: opts}
	if err := os.WriteFile(c.conf, []byte(slurmConf(p)), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.dir, "gres.conf"), []byte(gresConf(c.dir, opts.GPUs)), 0o644); err != nil {
		return err
	}
	if err := c.startMunge(ctx); err != nil {
		return err
	}
	env := append(proctest.GorunEnv(), "SLURM_CONF="+c.conf)
	// slurmctld in a UTS namespace of its own whose host name is the one
	// in SlurmctldHost: slurmctld refuses to run on a host of another name.
	uts := `hostname "$0" && exec "$1" -D -f "$2"`
	if c.ctld, err = startDaemon(c.dir, "slurmctld", env, c.bins["unshare"], "--uts", "--", "sh", "-c", uts, c.ctlName, c.bins["slurmctld"], c.conf); err != nil {
		return err
	}
	if err := c.poll(ctx, "slurmctld to answer", []*daemon{c.ctld}, func() bool {
		out, _ := c.Command(ctx, "scontrol", "ping").CombinedOutput()
		return strings.Contains(string(out), "is UP")
	}); err != nil {
		return err
	}
	// Each slurmd in its host's network namespace (nsenter: `ip netns
	// exec` would also mount a /sys of its own) and a UTS namespace whose
	// host name is the node's name.
	uts = `hostname "$0" && exec "$1" -D -N "$0" -f "$2"`
	for i, n := range c.nodes {
		d, err := startDaemon(c.dir, "slurmd-"+n, env, c.bins["nsenter"], "--net=/run/netns/"+c.hosts.Namespace(i), "--",
			c.bins["unshare"], "--uts", "--", "sh", "-c", uts, n, c.bins["slurmd"], c.conf)
		if err != nil {
			return err
		}
		c.slurmds = append(c.slurmds, d)
	}
	return c.WaitNodesIdle(ctx)
}

// startMunge starts the cluster's munged: its own key, socket, pid and
// seed files in the cluster's folder, none of the machine's.
func (c *Cluster) startMunge(ctx context.Context) error {
	mdir := filepath.Join(c.dir, "munge")
	key := make([]byte, 128) // the size `mungekey -c` makes
	if _, err := rand.Read(key); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(mdir, "munge.key"), key, 0o600); err != nil {
		return err
	}
	sock := filepath.Join(mdir, "munge.socket")
	var err error
	c.munged, err = startDaemon(c.dir, "munged", append(proctest.GorunEnv(), "SLURM_CONF="+c.conf), c.bins["munged"], "--foreground", "--force",
		"--socket="+sock, "--key-file="+filepath.Join(mdir, "munge.key"), "--pid-file="+filepath.Join(mdir, "munged.pid"),
		"--seed-file="+filepath.Join(mdir, "munged.seed"), "--log-file="+filepath.Join(c.dir, "log", "munged.log"))
	if err != nil {
		return err
	}
	return c.poll(ctx, "munged's socket", []*daemon{c.munged}, func() bool {
		conn, err := net.Dial("unix", sock)
		if err == nil {
			conn.Close()
		}
		return err == nil
	})
}

// poll waits until cond holds, failing early if one of ds ends.
func (c *Cluster) poll(ctx context.Context, what string, ds []*daemon, cond func() bool) error {
	for !cond() {
		for _, d := range ds {
			if d.exited() {
				return fmt.Errorf("%s ended while waiting for %s: %s", d.name, what, d.cmd.ProcessState)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(50 * time.Millisecond): // polling with a deadline
		}
	}
	return nil
}

// repoRoot is the nearest folder above the working directory that holds
// go.mod: the repository whose bin/ holds gorun.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = parent
	}
}
