package cmdline

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// flagsFirst moves a subcommand's flags before its arguments (`gorun
// report LOGDIR --format json` is `gorun report --format json LOGDIR`),
// as go, git and kubectl take them: the flag parser stops at the first
// argument. It finds the command (and subcommand) that args name, reads
// the rest as that command's parser does (a flag that takes a value takes
// the next argument unless written --flag=value) and keeps everything
// after "--" in place. A launch (no command) is left as it is: there,
// everything after the script is the script's.
func flagsFirst(cmds []*cli.Command, args []string) []string {
	i := 1
	var cmd *cli.Command
	for i < len(args) {
		next := findCommand(cmds, args[i])
		if next == nil {
			break
		}
		cmd, cmds, i = next, next.Subcommands, i+1
	}
	if cmd == nil || cmd.SkipFlagParsing {
		return args // a launch, or a command that reads its own (gorun-etcd's, run by gorun)
	}
	takesValue := map[string]bool{}
	for _, f := range cmd.Flags {
		tv, ok := f.(interface{ TakesValue() bool })
		for _, n := range f.Names() {
			takesValue[n] = ok && tv.TakesValue()
		}
	}
	out := append([]string(nil), args[:i]...)
	var positional []string
	for ; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			positional = append(positional, args[i:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			positional = append(positional, a)
			continue
		}
		out = append(out, a)
		name, _, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if takesValue[name] && !hasValue && i+1 < len(args) {
			i++
			out = append(out, args[i])
		}
	}
	return append(out, positional...)
}

// findCommand is the command of cmds named (or aliased) name, or nil.
func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
