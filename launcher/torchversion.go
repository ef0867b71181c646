package launcher

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
)

// TorchMajor returns the major version of the torch package that the
// workers' interpreter would import (1 for Debian's 1.13, 2 for 2.x), found
// without starting Python, which would cost more than gorun's whole
// launch: it reads __version__ from torch/version.py in the folders Python
// searches, in Python's order (PYTHONPATH, the user's site-packages, then
// the interpreter's or its virtual environment's). ok is false where no
// torch is found (or python is not an interpreter gorun can place).
//
// gorun uses it where torch's versions read different variables: 1.x reads
// NCCL_ASYNC_ERROR_HANDLING, which 2.x still honours but warns about on
// every rank.
func TorchMajor(python string, environ []string) (major int, ok bool) {
	for _, dir := range pythonPaths(python, environ) {
		data, err := os.ReadFile(filepath.Join(dir, "torch", "version.py"))
		if err != nil {
			continue
		}
		m := torchVersionRe.FindSubmatch(data)
		if m == nil {
			return 0, false
		}
		n, err := strconv.Atoi(string(m[1]))
		return n, err == nil
	}
	return 0, false
}

// torchVersionRe finds the major version in torch/version.py's
// `__version__ = '2.15.0+cu132'`.
var torchVersionRe = regexp.MustCompile(`(?m)^__version__\s*=\s*['"](\d+)\.`)

// includeSystemRe finds a virtual environment's pyvenv.cfg line that adds
// the base installation's packages.
var includeSystemRe = regexp.MustCompile(`(?m)^include-system-site-packages\s*=\s*true`)

// pythonPaths lists the folders where python finds packages, in the
// order it searches them, as far as they can be known from the files: the
// PYTHONPATH entries, the user's site-packages (not in a virtual
// environment), then the environment's or the installation's own.
func pythonPaths(python string, environ []string) []string {
	path, err := exec.LookPath(python)
	if err != nil {
		return nil
	}
	var dirs []string
	if pp, _ := lookupEnv(environ, "PYTHONPATH"); pp != "" {
		for _, d := range filepath.SplitList(pp) {
			if d != "" {
				dirs = append(dirs, d)
			}
		}
	}
	// A virtual environment: bin/python beside ../pyvenv.cfg; its
	// interpreter is a link to the base one, which is not followed.
	venv := filepath.Dir(filepath.Dir(path))
	if cfg, err := os.ReadFile(filepath.Join(venv, "pyvenv.cfg")); err == nil {
		dirs = append(dirs, sitePackages(venv)...)
		if !includeSystemRe.Match(cfg) {
			return dirs
		}
	} else if home, _ := lookupEnv(environ, "HOME"); home != "" {
		dirs = append(dirs, globAll(filepath.Join(home, ".local", "lib", "python3*", "site-packages"))...)
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return dirs
	}
	prefix := filepath.Dir(filepath.Dir(real))
	dirs = append(dirs, sitePackages(prefix)...)
	// Debian's: /usr/local's dist-packages, then /usr/lib/python3's.
	dirs = append(dirs, globAll(filepath.Join(prefix, "local", "lib", "python3*", "dist-packages"))...)
	dirs = append(dirs, filepath.Join(prefix, "lib", "python3", "dist-packages"))
	return dirs
}

// sitePackages lists prefix/lib/python3.X/site-packages.
func sitePackages(prefix string) []string {
	return globAll(filepath.Join(prefix, "lib", "python3*", "site-packages"))
}

func globAll(pattern string) []string {
	m, _ := filepath.Glob(pattern)
	return m
}
