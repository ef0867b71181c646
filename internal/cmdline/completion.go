package cmdline

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"
)

// printCompletion writes a completion script for shell (bash, zsh or
// tcsh) to w, as torchrun 2.x's --print-completion does with shtab: the
// launch flags in both spellings and the subcommands; anything else
// completes as a file (the training script and its arguments).
func printCompletion(w io.Writer, shell string, flags []cli.Flag) error {
	var names []string
	for _, f := range flags {
		for _, n := range f.Names() {
			if len(n) == 1 {
				names = append(names, "-"+n)
			} else {
				names = append(names, "--"+n)
			}
		}
	}
	slices.Sort(names)
	words := strings.Join(names, " ")
	commands := strings.Join(commandNames, " ")
	var script string
	switch shell {
	case "bash":
		script = `# gorun's completion for bash: source it, or save it as
# /etc/bash_completion.d/gorun (gorun --print-completion bash)
_gorun() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "` + words + `" -- "$cur") )
    elif [[ $COMP_CWORD -eq 1 ]]; then
        COMPREPLY=( $(compgen -W "` + commands + `" -- "$cur") $(compgen -f -- "$cur") )
    else
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
}
complete -o filenames -F _gorun gorun
`
	case "zsh":
		script = `#compdef gorun
# gorun's completion for zsh: save it as _gorun in a folder of $fpath, or
# source it after compinit (gorun --print-completion zsh)
_gorun() {
    if [[ $PREFIX == -* ]]; then
        compadd -- ` + words + `
    else
        (( CURRENT == 2 )) && compadd -- ` + commands + `
        _files
    fi
}
if [[ $zsh_eval_context[-1] == loadautofunc ]]; then
    _gorun "$@"
else
    compdef _gorun gorun
fi
`
	case "tcsh":
		plain := make([]string, len(names))
		for i, n := range names {
			plain[i] = strings.TrimLeft(n, "-")
		}
		script = `# gorun's completion for tcsh: source it (gorun --print-completion tcsh)
complete gorun 'c/--/(` + strings.Join(plain, " ") + `)/' 'p/1/(` + commands + `)/' 'n/*/f/'
`
	default:
		return fmt.Errorf("--%s=%q: want bash, zsh or tcsh", fCompletion, shell)
	}
	_, err := io.WriteString(w, script)
	return err
}
