// Package dlsearch finds a shared library the way gorun's backends do:
// an environment variable's path, then the dynamic loader's own search
// by name, then well-known folders (such as the nvidia/*/lib folders of
// Python's site-packages); a failure names every place tried.
package dlsearch

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Spec says where to look for one library.
type Spec struct {
	// What names the library in messages ("NCCL").
	What string
	// Env is the variable that gives its path.
	Env string
	// Names are tried with the dynamic loader's search.
	Names []string
	// Globs are tried last (filepath.Glob patterns).
	Globs []string
}

// Find calls open on each candidate until one succeeds; open returns a
// message for its failure.
func Find(s Spec, open func(path string) error) error {
	if p := os.Getenv(s.Env); p != "" {
		if err := open(p); err != nil {
			return fmt.Errorf("%s library: %s=%s: %w", s.What, s.Env, p, err)
		}
		return nil
	}
	var tried []string
	for _, n := range s.Names {
		err := open(n)
		if err == nil {
			return nil
		}
		tried = append(tried, err.Error())
	}
	for _, g := range s.Globs {
		matches, _ := filepath.Glob(g)
		for _, m := range matches {
			if open(m) == nil {
				return nil
			}
		}
	}
	return fmt.Errorf("%s library not found: %s is unset; the dynamic loader (LD_LIBRARY_PATH=%q, its cache, /lib, /usr/lib) found none of %s (%s); nothing matched %s",
		s.What, s.Env, os.Getenv("LD_LIBRARY_PATH"), strings.Join(s.Names, ", "), strings.Join(tried, "; "), strings.Join(s.Globs, ", "))
}

// SitePackages returns, for a path inside a Python package (such as
// "nvidia/nccl/lib/libnccl.so.2"), the patterns of the places pip puts it.
func SitePackages(inside string) []string {
	dirs := []string{"/usr/lib/python3/dist-packages", "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages",
		"/usr/lib/python3*/site-packages", "/opt/conda/lib/python3*/site-packages"}
	if h, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(h, ".local/lib/python3*/site-packages"))
	}
	if v := os.Getenv("VIRTUAL_ENV"); v != "" {
		dirs = append(dirs, filepath.Join(v, "lib/python3*/site-packages"))
	}
	out := make([]string, len(dirs))
	for i, d := range dirs {
		out[i] = filepath.Join(d, inside)
	}
	return out
}
