package main

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/gorun-dev/gorun/internal/testkit/cdouble"
)

// vendorDoubles builds the test doubles of a vendor's libraries and
// returns the environment that points gorun's workers at them.
func vendorDoubles(t *testing.T, backend string) []string {
	switch backend {
	case "nccl":
		return []string{
			"GORUN_NCCL_LIBRARY=" + cdouble.BuildFrom(t, "../../comm/nccl/testdata", "nccl_double.c", "libnccl-double.so"),
			"GORUN_CUDART_LIBRARY=" + cdouble.BuildFrom(t, "../../comm/nccl/testdata", "cudart_double.c", "libcudart-double.so"),
		}
	case "hccl":
		return []string{
			"GORUN_HCCL_LIBRARY=" + cdouble.BuildFrom(t, "../../comm/hccl/testdata", "hccl_double.c", "libhccl-double.so"),
			"GORUN_ACL_LIBRARY=" + cdouble.BuildFrom(t, "../../comm/hccl/testdata", "acl_double.c", "libascendcl-double.so"),
		}
	}
	t.Fatalf("no doubles for %s", backend)
	return nil
}

// TestGoDDPOnVendorDoubles: bin/ddp --backend nccl|hccl, launched by
// gorun, goes through dlopen, the device runtime (uploads, downloads,
// streams) and the vendor's process group, and trains the same model as
// the CPU backend. The doubles keep their ranks in one process, so one
// worker here; real GPUs: make test-gpu.
func TestGoDDPOnVendorDoubles(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"nccl", "hccl"} {
		ddpMatchesCPU(t, backend, vendorDoubles(t, backend))
	}
}

// TestGoDDPOnTheGPU is TestGoDDPOnVendorDoubles on a real GPU with the
// real NCCL (make test-gpu).
func TestGoDDPOnTheGPU(t *testing.T) {
	skipWithoutGPU(t)
	ddpMatchesCPU(t, "nccl", nil)
}

// TestBenchCommOnTheGPU: gorun bench comm --backend nccl on a real GPU.
func TestBenchCommOnTheGPU(t *testing.T) {
	skipWithoutGPU(t)
	benchCommChecks(t, "nccl", nil)
}

func skipWithoutGPU(t *testing.T) {
	if os.Getenv("GORUN_TEST_GPU") != "1" {
		t.Skip("GORUN_TEST_GPU=1 runs this on a GPU machine (make test-gpu)")
	}
}

// ddpMatchesCPU trains with bin/ddp on backend (one worker) and on the
// CPU backend and wants the same last line.
func ddpMatchesCPU(t *testing.T, backend string, vendorEnv []string) {
	t.Helper()
	run := func(env []string, backend string) string {
		r := runGorun(t, testEnv(env...), "--nproc-per-node=1", "--no-python", ddpBin, "--steps", "4", "--backend", backend)
		final := linesWithPrefix(r.stdout, "[default0]:final ")
		if r.code != 0 || len(final) != 1 {
			t.Fatalf("%s: exit %d\n%s\n%s", backend, r.code, r.stdout, r.stderr)
		}
		return final[0]
	}
	cpu := run(nil, "cpu")
	if got := run(vendorEnv, backend); got != cpu {
		t.Errorf("%s: %q; the cpu backend gave %q", backend, got, cpu)
	}
}

// TestVendorBackendMissingLibrary: without the library, the worker fails
// with an error that names the variable and the places searched.
func TestVendorBackendMissingLibrary(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ backend, env string }{{"nccl", "GORUN_NCCL_LIBRARY"}, {"hccl", "GORUN_HCCL_LIBRARY"}} {
		r := runGorun(t, testEnv(c.env+"=/nonexistent/lib.so"), "--nproc-per-node=1", "--no-python", ddpBin, "--backend", c.backend)
		if r.code == 0 || !strings.Contains(r.stderr, c.env+"=/nonexistent/lib.so") {
			t.Errorf("%s: exit %d; want an error naming %s\n%s", c.backend, r.code, c.env, r.stderr)
		}
	}
	r := runGorun(t, testEnv(), "--nproc-per-node=1", "--no-python", ddpBin, "--backend", "mpi")
	if r.code == 0 || !strings.Contains(r.stderr, `backend "mpi": want cpu, nccl or hccl`) {
		t.Errorf("unknown backend: exit %d\n%s", r.code, r.stderr)
	}
}

// TestBenchCommOnVendorDoubles: gorun bench comm --backend nccl|hccl runs
// and checks every op through the vendor's group (one worker; see
// TestGoDDPOnVendorDoubles).
func TestBenchCommOnVendorDoubles(t *testing.T) {
	t.Parallel()
	for _, backend := range []string{"nccl", "hccl"} {
		benchCommChecks(t, backend, vendorDoubles(t, backend))
	}
}

// benchCommChecks runs every op of gorun bench comm on backend (one
// worker) and wants each correct.
func benchCommChecks(t *testing.T, backend string, vendorEnv []string) {
	t.Helper()
	r := runGorun(t, testEnv(vendorEnv...), "bench", "comm", "--nproc-per-node", "1", "--backend", backend,
		"--ops", "all_reduce,all_gather,reduce_scatter,all_to_all,broadcast,send_recv,barrier", "--sizes", "4KiB",
		"--iters", "2", "--warmup", "1", "--skip-anchors", "--format", "json")
	if r.code != 0 {
		t.Fatalf("%s: exit %d\n%s", backend, r.code, r.stderr)
	}
	var rep struct {
		Backend string `json:"backend"`
		Results []struct {
			Op      string `json:"op"`
			Correct bool   `json:"correct"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
		t.Fatalf("%s: %v: %q", backend, err, r.stdout)
	}
	if rep.Backend != backend || len(rep.Results) != 7 {
		t.Fatalf("%s: report %+v", backend, rep)
	}
	for _, res := range rep.Results {
		if !res.Correct {
			t.Errorf("%s: %s not correct", backend, res.Op)
		}
	}
}
