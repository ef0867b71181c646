// Package cdouble builds test-double shared libraries from C sources, for
// tests of the cgo bindings (comm/nccl, comm/hccl).
package cdouble

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Build compiles testdata/src into a shared library named lib in a
// temporary directory and returns its path; it skips the test when no C
// compiler is installed.
func Build(t testing.TB, src, lib string, flags ...string) string {
	t.Helper()
	return BuildFrom(t, "testdata", src, lib, flags...)
}

// BuildFrom is Build with the source in dir.
func BuildFrom(t testing.TB, dir, src, lib string, flags ...string) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("gcc is needed to build the test doubles")
	}
	out := filepath.Join(t.TempDir(), lib)
	args := append([]string{"-shared", "-fPIC", "-O2", "-o", out, filepath.Join(dir, src), "-lpthread"}, flags...)
	if b, err := exec.Command("gcc", args...).CombinedOutput(); err != nil {
		t.Fatalf("gcc %s: %v\n%s", src, err, b)
	}
	return out
}
