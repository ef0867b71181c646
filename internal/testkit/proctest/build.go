package proctest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// BuildGorun builds gorun and, beside it (where gorun looks for it),
// gorun-etcd into a new temporary folder, from the module whose root is
// root (a path relative to the test's package, such as "../.."), and the
// programs of extra (package paths in the module, such as
// "examples/ddp"), each named after its folder, beside them. It returns
// gorun's path and a function that removes the folder.
func BuildGorun(root string, extra ...string) (gorun string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "gorun-test-bin-")
	if err != nil {
		return "", nil, err
	}
	remove = func() { os.RemoveAll(dir) }
	for _, pkg := range append([]string{"cmd/gorun", "cmd/gorun-etcd"}, extra...) {
		build := exec.Command("go", "build", "-tags", "urfave_cli_no_docs", "-o", filepath.Join(dir, filepath.Base(pkg)), "./"+pkg)
		build.Dir = root
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			remove()
			return "", nil, fmt.Errorf("build %s: %w", pkg, err)
		}
	}
	return filepath.Join(dir, "gorun"), remove, nil
}

// RunMostlyWaiting raises -test.parallel to at least n (and the CPU
// count) unless the command line sets it: for packages whose tests mostly
// wait on processes (Python starting, a rendezvous), not on the CPU. Call
// it from TestMain after flag.Parse.
func RunMostlyWaiting(n int) {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set {
		flag.Set("test.parallel", fmt.Sprint(max(n, runtime.GOMAXPROCS(0))))
	}
}
