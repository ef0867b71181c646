// Command hello is a tiny worker for gorun's demo: it prints where it
// stands in the job (rank, world size, master address, restart count),
// does a few steps of pretend work, and can fail on purpose so that the
// demo shows a restart.
//
//	gorun --nproc-per-node=3 --max-restarts=1 --no-python bin/hello --fail-rank=1
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"
)

func main() {
	failRank := flag.Int("fail-rank", -1, "rank that exits with --fail-code on the first attempt (-1: none)")
	failCode := flag.Int("fail-code", 1, "exit code of the failing rank")
	steps := flag.Int("steps", 3, "steps of pretend work")
	stepTime := flag.Duration("step-time", 50*time.Millisecond, "duration of one step")
	flag.Parse()

	env := func(k string) string { return os.Getenv(k) }
	rank, _ := strconv.Atoi(env("RANK"))
	restart, _ := strconv.Atoi(env("TORCHELASTIC_RESTART_COUNT"))
	fmt.Printf("rank %s of %s (local rank %s), master %s:%s, attempt %d, run %s\n",
		env("RANK"), env("WORLD_SIZE"), env("LOCAL_RANK"), env("MASTER_ADDR"), env("MASTER_PORT"), restart, env("TORCHELASTIC_RUN_ID"))
	for i := range *steps {
		if rank == *failRank && restart == 0 && i == 1 {
			fmt.Fprintf(os.Stderr, "rank %d: failing on purpose at step %d (exit %d)\n", rank, i, *failCode)
			os.Exit(*failCode)
		}
		time.Sleep(*stepTime)
		fmt.Printf("step %d done\n", i)
	}
	fmt.Println("finished")
}
