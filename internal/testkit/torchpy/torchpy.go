// Package torchpy finds the Python interpreter that gorun's PyTorch tests
// run their workers and torchrun with.
//
// The reference is PyTorch 2.x from the package index, in the virtual
// environment that tests/torch2/venv.sh makes outside the checkout (`make
// torch2-python`; `make test` makes it first and passes it on as
// GORUN_TORCH2_PYTHON). Debian's python3-torch 1.13 in /usr/bin/python3 is
// the oldest version gorun supports: the tests run against it where
// GORUN_TEST_PYTHON names it (make test's 1.13 run), and fall back to it,
// loudly, where no 2.x environment exists. With GORUN_REQUIRE_TORCH2=1 (set
// by .ci/run) a missing 2.x is an error, not a fallback.
package torchpy

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
)

// Debian is the interpreter of Debian's python3-torch (1.13).
const Debian = "/usr/bin/python3"

// Choice is the interpreter the PyTorch tests use, and what it has.
type Choice struct {
	// Python is the interpreter's path.
	Python string
	// Torch is its torch.__version__ ("2.15.0+cu130", "1.13.0a0+git7c98e70d");
	// "" where torch cannot be imported.
	Torch string
	// Missing says why the PyTorch tests cannot run with Python ("" if
	// they can): torch not importable, or not 2.x where 2.x is required.
	Missing string
	// From says how Python was chosen, for the test log.
	From string
}

// Major is the major version of Torch, 0 where torch is missing.
func (c Choice) Major() int {
	n, _ := strconv.Atoi(strings.SplitN(c.Torch, ".", 2)[0])
	return n
}

// String describes the choice in one line.
func (c Choice) String() string {
	if c.Missing != "" {
		return fmt.Sprintf("%s (%s): %s", c.Python, c.From, c.Missing)
	}
	return fmt.Sprintf("%s (%s): torch %s", c.Python, c.From, c.Torch)
}

// Find chooses the interpreter for the tests of a package whose module
// root is root (a path relative to the package, such as "../.."):
// GORUN_TEST_PYTHON where set, else the PyTorch 2.x environment
// (GORUN_TORCH2_PYTHON, or tests/torch2/venv.sh --find), else Debian's
// 1.13, else python3 on PATH. Where the choice is not 2.x it writes a
// loud line to standard error; with GORUN_REQUIRE_TORCH2=1 its Missing
// says so.
func Find(root string) Choice {
	c := find(root)
	c.probe()
	if c.Missing == "" && c.Major() < 2 && os.Getenv("GORUN_TEST_PYTHON") == "" {
		msg := fmt.Sprintf("!!!!!!!! NO PYTORCH 2.x ENVIRONMENT (make torch2-python makes it): the PyTorch tests run on %s", c)
		if os.Getenv("GORUN_REQUIRE_TORCH2") == "1" {
			c.Missing = msg + "; GORUN_REQUIRE_TORCH2=1 requires 2.x"
		}
		fmt.Fprintln(os.Stderr, msg)
	}
	return c
}

// Oldest is Debian's python3-torch 1.13, the oldest version gorun
// supports, where it is installed.
func Oldest() Choice {
	c := Choice{Python: Debian, From: "Debian's python3-torch"}
	c.probe()
	return c
}

func find(root string) Choice {
	if p := os.Getenv("GORUN_TEST_PYTHON"); p != "" {
		return Choice{Python: p, From: "GORUN_TEST_PYTHON"}
	}
	if p := os.Getenv("GORUN_TORCH2_PYTHON"); p != "" {
		return Choice{Python: p, From: "GORUN_TORCH2_PYTHON"}
	}
	script := filepath.Join(root, "tests", "torch2", "venv.sh")
	if out, err := exec.Command("bash", script, "--find").Output(); err == nil {
		if p := strings.TrimSpace(string(out)); p != "" {
			return Choice{Python: p, From: "tests/torch2/venv.sh"}
		}
	}
	if _, err := os.Stat(Debian); err == nil {
		return Choice{Python: Debian, From: "Debian's python3-torch, no 2.x environment"}
	}
	return Choice{Python: "python3", From: "python3 on PATH, no 2.x environment"}
}

// probe fills Torch, or Missing where the interpreter cannot import
// torch.distributed.run (what torchrun and the workers need).
func (c *Choice) probe() {
	out, err := exec.Command(c.Python, "-c", "import torch, torch.distributed.run; print(torch.__version__)").CombinedOutput()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := lines[len(lines)-1]
	if err != nil {
		c.Missing = fmt.Sprintf("cannot import torch.distributed.run (%v: %s)", err, last)
		return
	}
	c.Torch = last
}
