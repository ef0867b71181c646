package cmdline

import (
	"fmt"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// expandAbbreviations writes out the launch flags given by an unambiguous
// prefix (--nproc=2 for --nproc-per-node=2, --redirect=3), as torchrun's
// argparse accepts them: a prefix that begins the names of one flag only
// (both spellings of a flag are one flag) is that flag. It reads the
// arguments as isLaunch does and stops at the script, at "--" and at a
// command's name, so the script's own arguments and subcommands are never
// touched. A prefix of several flags is an error naming them, as
// argparse's "ambiguous option".
func expandAbbreviations(args []string, flags []cli.Flag) ([]string, error) {
	owner := map[string]cli.Flag{} // every name, to its flag
	var names []string
	bools := map[string]bool{}
	for _, f := range flags {
		_, isBool := f.(*boolFlag)
		for _, n := range f.Names() {
			owner[n], bools[n] = f, isBool
			names = append(names, n)
		}
	}
	slices.Sort(names)
	out := slices.Clone(args)
	for i := 1; i < len(out); i++ {
		a := out[i]
		if a == "--" || len(a) < 2 || a[0] != '-' {
			break // the script, a command, or the end of the flags
		}
		if !strings.HasPrefix(a, "--") || len(a) == 2 {
			name, _, hasValue := strings.Cut(a[1:], "=")
			if owner[name] != nil && !hasValue && !bools[name] {
				i++
			}
			continue // short flags are written out already
		}
		name, value, hasValue := strings.Cut(a[2:], "=")
		if owner[name] == nil {
			var match []string
			flagsOf := map[cli.Flag]bool{}
			for _, n := range names {
				if len(n) > 1 && strings.HasPrefix(n, name) {
					match = append(match, "--"+n)
					flagsOf[owner[n]] = true
				}
			}
			if len(flagsOf) > 1 {
				// A prefix that names one torchrun flag is that flag, as
				// under torchrun, even where gorun's own flags share it
				// (--re: --redirects, not --report).
				if f := onlyTorchrunFlag(flagsOf); f != nil {
					match, flagsOf = []string{"--" + f.Names()[0]}, map[cli.Flag]bool{f: true}
				}
			}
			switch {
			case len(flagsOf) > 1:
				return nil, fmt.Errorf("ambiguous option: --%s could match %s", name, strings.Join(match, ", "))
			case len(flagsOf) == 0:
				break // unknown: the parser says so
			default:
				name = strings.TrimPrefix(match[0], "--")
				out[i] = "--" + name
				if hasValue {
					out[i] += "=" + value
				}
			}
		}
		if owner[name] != nil && !hasValue && !bools[name] {
			i++ // the flag's value
		}
	}
	return out, nil
}

// onlyTorchrunFlag is the one flag of flags that torchrun has (the flags
// with a PET_ variable are torchrun's), or nil if there is not one.
func onlyTorchrunFlag(flags map[cli.Flag]bool) cli.Flag {
	var found cli.Flag
	for f := range flags {
		env, _ := f.(interface{ GetEnvVars() []string })
		if env == nil || !slices.ContainsFunc(env.GetEnvVars(), func(v string) bool { return strings.HasPrefix(v, "PET_") }) {
			continue
		}
		if found != nil {
			return nil
		}
		found = f
	}
	return found
}
