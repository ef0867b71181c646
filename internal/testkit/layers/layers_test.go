package layers

import (
	"bufio"
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/gorun-dev/gorun/"

// imports lists, for each package of the module, what its non-test files
// import (go list's Imports).
func imports(t *testing.T) map[string][]string {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v%s", err, stderr(err))
	}
	m := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		m[strings.TrimPrefix(f[0], module)] = f[1:]
	}
	if len(m) < 20 {
		t.Fatalf("go list found %d packages; want the module's", len(m))
	}
	return m
}

// TestDependenciesPointOneWay: each rule names packages (by prefix of
// their path in the module) that must not import others; the exceptions
// are the packages the rule is about.
func TestDependenciesPointOneWay(t *testing.T) {
	pkgs := imports(t)
	for _, rule := range []struct {
		why     string
		from    []string // prefixes of the packages the rule binds
		except  []string // prefixes of packages exempt from it
		mustNot []string // prefixes they must not import
		// mustNotPkg are packages they must not import, by exact path
		// (those below them may be allowed).
		mustNotPkg []string
	}{
		{why: "test helpers are never product code", from: []string{""}, except: []string{"internal/testkit/"}, mustNot: []string{module + "internal/testkit/"}},
		{why: "only the companion binary links etcd", from: []string{""},
			except: []string{"rendezvous/etcd", "internal/cmdline/companion", "cmd/gorun-etcd", "internal/bench/rdzvbench", "internal/testkit/"}, mustNot: []string{"go.etcd.io/", module + "rendezvous/etcd"}},
		{why: "the launcher knows the rendezvous interface, not a backend", from: []string{"launcher"}, mustNot: []string{module + "rendezvous/"}},
		{why: "nothing below the command line imports it", from: []string{"launcher", "rendezvous", "comm", "watchdog", "topology", "memory", "internal/sys/", "internal/workerenv", "internal/setting", "internal/bench", "internal/tracefind"}, mustNot: []string{module + "internal/cmdline"}},
		{why: "the building blocks import no product package", from: []string{"internal/sys/", "internal/workerenv", "internal/setting"},
			mustNot: []string{module + "launcher", module + "rendezvous", module + "comm", module + "watchdog", module + "topology", module + "memory", module + "internal/bench", module + "internal/tracefind"}},
		{why: "launcher and comm share the worker contract, not each other", from: []string{"comm"}, mustNot: []string{module + "launcher"}},
		{why: "memory and layouts sit below the runtime", from: []string{"memory", "topology", "watchdog"},
			mustNot: []string{module + "comm", module + "launcher", module + "rendezvous", module + "internal/bench", module + "internal/tracefind"}},
		{why: "memory knows no layout", from: []string{"memory"}, mustNot: []string{module + "topology"}},
		{why: "launcher and comm share the worker contract, not each other", from: []string{"launcher"}, mustNot: []string{module + "comm"}},
		{why: "the job's credentials know neither the store's server nor the rendezvous protocol", from: []string{"rendezvous/etcd/jobauth"},
			mustNot: []string{module + "rendezvous/etcd/jobstore"}, mustNotPkg: []string{module + "rendezvous/etcd"}},
		{why: "the store's server knows not the rendezvous protocol it serves", from: []string{"rendezvous/etcd/jobstore"},
			mustNotPkg: []string{module + "rendezvous/etcd"}},
	} {
		for pkg, imps := range pkgs {
			if !hasPrefix(pkg, rule.from) || hasPrefix(pkg, rule.except) {
				continue
			}
			for _, imp := range imps {
				if hasPrefix(imp, rule.mustNot) || slices.Contains(rule.mustNotPkg, imp) {
					t.Errorf("%s imports %s: %s", pkg, imp, rule.why)
				}
			}
		}
	}
}

// TestGorunLinksNoEtcd: the gorun binary starts without etcd's package
// initialisation, transitively.
func TestGorunLinksNoEtcd(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"cmd/gorun").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v%s", err, stderr(err))
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.etcd.io/") || strings.HasPrefix(dep, "google.golang.org/grpc") {
			t.Errorf("cmd/gorun links %s: etcd belongs in gorun-etcd alone", dep)
		}
	}
}

// stderr is what a failed command said.
func stderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return "\n" + string(ee.Stderr)
	}
	return ""
}

func hasPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
