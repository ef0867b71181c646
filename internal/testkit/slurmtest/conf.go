package slurmtest

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// Partitions of every cluster: both hold all the nodes; a job in High
// preempts (cancels) jobs in Low that hold the resources it needs.
const (
	PartitionLow  = "low"  // the default partition, PriorityTier=1
	PartitionHigh = "high" // PriorityTier=10
)

// confParams is what slurm.conf and gres.conf are made from.
type confParams struct {
	cluster  string
	dir      string   // the cluster's folder
	ctlName  string   // slurmctld's host name
	ctlAddr  string   // slurmctld's address on the bridge
	nodes    []string // node names
	addrs    []string // node addresses
	ctlPort  int
	nodePort int
	hardware string // "CPUs=2 Boards=1 ..." as `slurmd -C` reports it
	gpus     int
	opts     Options
}

// slurmConf is the cluster's slurm.conf.
//
// Choices that make Slurm 22.05 run three slurmd on one machine:
//   - each slurmd is in its own network namespace, so all use the same
//     SlurmdPort; each has its own spool folder and pid file (%n);
//   - proctrack/linuxproc and task/none: no cgroup plugin, nothing read
//     from /sys that the namespaces would hide;
//   - the node's hardware line is the one `slurmd -C` reports, so that the
//     nodes register as IDLE (a node with fewer CPUs than configured is
//     INVAL);
//   - AuthInfo=socket= points auth/munge and cred/munge at the cluster's
//     own munged;
//   - MailProg=/bin/true: Debian has no mail program and slurmctld logs an
//     error at every start without one.
func slurmConf(p confParams) string {
	var b strings.Builder
	line := func(format string, args ...any) { fmt.Fprintf(&b, format+"\n", args...) }
	line("# made by internal/testkit/slurmtest for one test: removed when it ends")
	line("ClusterName=%s", p.cluster)
	line("SlurmctldHost=%s(%s)", p.ctlName, p.ctlAddr)
	line("SlurmctldPort=%d", p.ctlPort)
	line("SlurmdPort=%d", p.nodePort)
	line("SlurmUser=root")
	line("SlurmdUser=root")
	line("AuthType=auth/munge")
	line("CredType=cred/munge")
	authInfo := "socket=" + filepath.Join(p.dir, "munge", "munge.socket")
	if p.opts.CredExpire > 0 {
		authInfo += fmt.Sprintf(",cred_expire=%d", seconds(p.opts.CredExpire, 120))
	}
	line("AuthInfo=%s", authInfo)
	line("StateSaveLocation=%s", filepath.Join(p.dir, "state"))
	line("SlurmdSpoolDir=%s", filepath.Join(p.dir, "spool", "%n"))
	line("SlurmctldPidFile=%s", filepath.Join(p.dir, "run", "slurmctld.pid"))
	line("SlurmdPidFile=%s", filepath.Join(p.dir, "run", "slurmd-%n.pid"))
	line("SlurmctldLogFile=%s", filepath.Join(p.dir, "log", "slurmctld.log"))
	line("SlurmdLogFile=%s", filepath.Join(p.dir, "log", "slurmd-%n.log"))
	line("SlurmctldDebug=info")
	line("SlurmdDebug=info")
	line("MailProg=/bin/true")
	line("ProctrackType=proctrack/linuxproc")
	line("TaskPlugin=task/none")
	line("JobAcctGatherType=jobacct_gather/none")
	line("AccountingStorageType=accounting_storage/none")
	line("JobCompType=jobcomp/none")
	line("SchedulerType=sched/backfill")
	// A batch job is scheduled when it is submitted, not up to 3 s later.
	line("SchedulerParameters=batch_sched_delay=0")
	line("SelectType=select/cons_tres")
	line("SelectTypeParameters=CR_Core")
	line("MpiDefault=none")
	// A node that stopped answering (a cut link) is usable again as soon
	// as its slurmd registers.
	line("ReturnToService=2")
	line("InactiveLimit=0")
	line("MessageTimeout=%d", seconds(p.opts.MessageTimeout, 5))
	line("SlurmdTimeout=%d", seconds(p.opts.SlurmdTimeout, 30))
	// KillWait is left at Slurm's default (30 s) unless the options set it:
	// tests of a job's stop depend on the real default.
	if p.opts.KillWait > 0 {
		line("KillWait=%d", seconds(p.opts.KillWait, 30))
	}
	line("GresTypes=gpu")
	line("PreemptType=preempt/partition_prio")
	line("PreemptMode=CANCEL")
	line("NodeName=DEFAULT %s Gres=gpu:%d State=UNKNOWN", p.hardware, p.gpus)
	for i, n := range p.nodes {
		line("NodeName=%s NodeHostname=%s NodeAddr=%s", n, n, p.addrs[i])
	}
	grace := ""
	if p.opts.GraceTime > 0 {
		grace = fmt.Sprintf(" GraceTime=%d", seconds(p.opts.GraceTime, 0))
	}
	line("PartitionName=%s Nodes=ALL Default=YES PriorityTier=1 MaxTime=INFINITE State=UP%s", PartitionLow, grace)
	line("PartitionName=%s Nodes=ALL Default=NO PriorityTier=10 MaxTime=INFINITE State=UP", PartitionHigh)
	for _, l := range p.opts.ExtraConf {
		line("%s", l)
	}
	return b.String()
}

// gresConf is the cluster's gres.conf: n fake GPUs per node.
//
// Slurm 22.05 drops a GPU without File= ("Removing file-less GPU
// gpu:(null) from final GRES list"), and the node is then INVAL ("gres/gpu
// count reported lower than configured (0 < 4)"); a File= that is a
// regular file is refused ("is not a valid character or block device").
// So each fake GPU is a character device made in the cluster's folder with
// the numbers of /dev/null (1, 3): nothing opens them, and task/none puts
// no device cgroup around a job.
func gresConf(dir string, n int) string {
	return fmt.Sprintf("Name=gpu File=%s\n", filepath.Join(dir, "dev", fmt.Sprintf("gpu[0-%d]", n-1)))
}

// hardwareLine keeps the layout fields of `slurmd -C`'s first line
// ("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2
// ThreadsPerCore=1 RealMemory=24105").
func hardwareLine(out string) (string, error) {
	first, _, _ := strings.Cut(out, "\n")
	var keep []string
	for _, f := range strings.Fields(first) {
		k, _, _ := strings.Cut(f, "=")
		switch k {
		case "CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory":
			keep = append(keep, f)
		}
	}
	if len(keep) == 0 || !strings.HasPrefix(keep[0], "CPUs=") {
		return "", fmt.Errorf("`slurmd -C` printed no CPUs=: %q", out)
	}
	return strings.Join(keep, " "), nil
}

// seconds is d in whole seconds (at least 1), or def when d is 0.
func seconds(d time.Duration, def int) int {
	if d <= 0 {
		return def
	}
	return max(1, int((d+time.Second-1)/time.Second))
}
