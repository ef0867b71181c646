package cmdline

import (
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/storecmd"
	"github.com/gorun-dev/gorun/launcher"
	"github.com/gorun-dev/gorun/rendezvous"
)

// libraryDirs are the packages below the command line whose errors name
// settings, never flags (from the module's root, with their
// subpackages).
var libraryDirs = []string{"launcher", "rendezvous", "comm", "watchdog", "topology", "memory"}

// flagsAllowed are the library errors' mentions of a flag that is also
// gorun's, where they give advice about another program's command line:
// file (from the module's root) and flag. Other programs' flags that
// gorun has not (docker's --shm-size, srun's --ntasks-per-node) need no
// entry.
var flagsAllowed = map[[2]string]string{
	{"comm/env.go", "rdzv-backend"}: "torchrun's --rdzv-backend=c10d, for a Go worker that torchrun launched",
}

const settingPath = "github.com/gorun-dev/gorun/internal/setting"

// commandFlags are the names (aliases too) of every flag of gorun's
// command line: the launch's and each command's (gorun-etcd's own
// commands, in internal/cmdline/companion, aside).
func commandFlags(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	add := func(flags []cli.Flag) {
		for _, f := range flags {
			for _, n := range f.Names() {
				names[n] = true
			}
		}
	}
	add(launchFlags())
	var walk func([]*cli.Command)
	walk = func(cmds []*cli.Command) {
		for _, c := range cmds {
			add(c.Flags)
			walk(c.Subcommands)
		}
	}
	app := newApp(Options{}, []string{"gorun", "--help"})
	if len(app.Commands) == 0 {
		t.Fatal("newApp built no commands")
	}
	walk(app.Commands)
	// gorun store's, which gorun-etcd's companion defines
	// (internal/storecmd names them).
	names[storecmd.TokenFile] = true
	return names
}

// libraryFile is a parsed non-test Go file of libraryDirs.
type libraryFile struct {
	path string // from the module's root
	fset *token.FileSet
	file *ast.File
}

// libraryFiles parses the non-test Go files of libraryDirs.
func libraryFiles(t *testing.T) []libraryFile {
	t.Helper()
	files := goFiles(t, libraryDirs...)
	if len(files) < 100 {
		t.Fatalf("%d library files found; want the packages' (run from internal/cmdline)", len(files))
	}
	return files
}

// goFiles parses the non-test Go files of dirs (from the module's root,
// with their subpackages).
func goFiles(t *testing.T, dirs ...string) []libraryFile {
	t.Helper()
	var out []libraryFile
	for _, dir := range dirs {
		err := filepath.WalkDir(filepath.Join("..", "..", dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			rel := strings.TrimPrefix(filepath.ToSlash(p), "../../")
			if d.IsDir() {
				if d.Name() == "testdata" {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			fset := token.NewFileSet()
			f, err := parser.ParseFile(fset, p, nil, parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			out = append(out, libraryFile{rel, fset, f})
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) == 0 {
		t.Fatalf("no Go files in %v (run from internal/cmdline)", dirs)
	}
	return out
}

// importedAs maps the names f's imports go by to their paths.
func importedAs(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, imp := range f.Imports {
		path, _ := strconv.Unquote(imp.Path.Value)
		name := path[strings.LastIndex(path, "/")+1:]
		if imp.Name != nil {
			name = imp.Name.Name
		}
		m[name] = path
	}
	return m
}

// selector returns the import path and name of a call's function pkg.Name,
// or "" when it is not one.
func selector(fun ast.Expr, imports map[string]string) (path, name string) {
	sel, ok := fun.(*ast.SelectorExpr)
	if !ok {
		return "", ""
	}
	x, ok := sel.X.(*ast.Ident)
	if !ok {
		return "", ""
	}
	return imports[x.Name], sel.Sel.Name
}

// librarySettings lists the settings the library's errors name: each
// setting.Name("X") and constant of type setting.Name, with
// where it is.
func librarySettings(t *testing.T, files []libraryFile) map[setting.Name]string {
	t.Helper()
	settings := map[setting.Name]string{}
	for _, lf := range files {
		imports := importedAs(lf.file)
		ast.Inspect(lf.file, func(n ast.Node) bool {
			var lits []ast.Expr
			switch n := n.(type) {
			case *ast.CallExpr:
				if path, name := selector(n.Fun, imports); path == settingPath && name == "Name" {
					lits = n.Args
				}
			case *ast.ValueSpec:
				if path, name := selector(n.Type, imports); path == settingPath && name == "Name" {
					lits = n.Values
				}
			}
			for _, l := range lits {
				// "Conf." + key: a --rdzv-conf key chosen at run time,
				// which flagOf shows whatever the key.
				if b, ok := l.(*ast.BinaryExpr); ok && b.Op == token.ADD {
					if lit, ok := b.X.(*ast.BasicLit); ok && lit.Value == strconv.Quote(confSetting) {
						continue
					}
				}
				lit, ok := l.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					t.Errorf("%s: a setting.Name that is not a string literal: the tests cannot see it", lf.fset.Position(l.Pos()))
					continue
				}
				s, _ := strconv.Unquote(lit.Value)
				settings[setting.Name(s)] = lf.fset.Position(lit.Pos()).String()
			}
			return true
		})
	}
	if len(settings) == 0 {
		t.Fatal("the library names no setting: is the scan broken?")
	}
	return settings
}

// TestSettingsNameFlags: every setting that library errors name has its
// flag in settingFlags, and that flag is one of the command line's (a
// renamed or removed flag fails here); the table names no setting that
// no library error names.
func TestSettingsNameFlags(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t)
	// The library's settings, and those the companion hands it (gorun
	// store's token file).
	used := librarySettings(t, append(libraryFiles(t), goFiles(t, "internal/cmdline/companion")...))
	for setting, flag := range settingFlags {
		t.Run(string(setting), func(t *testing.T) {
			if !flags[flag] {
				t.Errorf("setting %s maps to --%s, which is no flag of gorun's", setting, flag)
			}
			if flagOf(setting) != "--"+flag {
				t.Errorf("flagOf(%s) = %q; want --%s", setting, flagOf(setting), flag)
			}
			if _, ok := used[setting]; !ok {
				t.Errorf("no library error names setting %s: drop it from settingFlags", setting)
			}
		})
	}
	for setting, where := range used {
		if key, ok := strings.CutPrefix(string(setting), confSetting); ok {
			if flagOf(setting) != "--"+fRdzvConf+" "+key || key == "" {
				t.Errorf("%s: setting %s shows as %q; want --%s %s", where, setting, flagOf(setting), fRdzvConf, key)
			}
			continue
		}
		if _, ok := settingFlags[setting]; !ok {
			t.Errorf("%s: setting %s has no flag in settingFlags: the user would read the Go name", where, setting)
		}
	}
}

// flagInText finds --name in a string; the name as the flag's own.
var flagInText = regexp.MustCompile(`--([A-Za-z0-9][A-Za-z0-9_-]*)`)

// TestLibraryErrorsNameNoFlag: no error that the library packages make
// names one of gorun's flags, or formats one ("--%s"), and neither does
// any other text they make (a message node 0 sends another node, a name
// in a list of differences, a probe's diagnosis, all of which end in
// errors): they name the setting (setting.Name), and the command line
// puts the flag in. Allowed: log lines (a method of a logger: Infof,
// Warnf, Errorf on a value, not fmt's or errors'); the texts of the
// command's own reports, printed as they are (reportFiles); advice about
// another program's flag of the same name as one of gorun's
// (flagsAllowed). An error constructor's own text has no exception but
// the last.
func TestLibraryErrorsNameNoFlag(t *testing.T) {
	t.Parallel()
	flags := commandFlags(t)
	constructors := map[[2]string]bool{{"fmt", "Errorf"}: true, {"errors", "New"}: true, {settingPath, "Errorf"}: true}
	seen := map[[2]string]bool{}
	seenReports := map[string]bool{}
	literals := 0
	for _, lf := range libraryFiles(t) {
		imports := importedAs(lf.file)
		// The calls the walk is inside: log lines, error constructors.
		var logged, errs []ast.Node
		report := reportFiles[lf.path] != ""
		if report {
			seenReports[lf.path] = true
		}
		ast.Inspect(lf.file, func(n ast.Node) bool {
			if n == nil {
				return true
			}
			for len(logged) > 0 && !contains(logged[len(logged)-1], n) {
				logged = logged[:len(logged)-1]
			}
			for len(errs) > 0 && !contains(errs[len(errs)-1], n) {
				errs = errs[:len(errs)-1]
			}
			if call, ok := n.(*ast.CallExpr); ok {
				if isLogCall(call, imports) {
					logged = append(logged, call)
				}
				if path, name := selector(call.Fun, imports); constructors[[2]string{path, name}] {
					errs = append(errs, call)
				}
			}
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING || len(logged) > 0 || (report && len(errs) == 0) {
				return true
			}
			text, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			literals++
			where := lf.fset.Position(lit.Pos())
			if flagFormat.MatchString(text) {
				t.Errorf("%s: %q formats a flag's name; name the setting instead (setting.Name)", where, text)
			}
			for _, m := range flagInText.FindAllStringSubmatch(text, -1) {
				name := m[1]
				if !flags[name] {
					continue
				}
				key := [2]string{lf.path, name}
				if _, ok := flagsAllowed[key]; ok {
					seen[key] = true
					continue
				}
				t.Errorf("%s: %q names gorun's flag --%s; name the setting instead (setting.Errorf with a setting.Name, mapped in settingFlags)", where, text, name)
			}
			return true
		})
	}
	if literals < 1000 {
		t.Fatalf("%d string literals found; is the scan broken?", literals)
	}
	for key, why := range flagsAllowed {
		if !seen[key] {
			t.Errorf("flagsAllowed lists --%s in %s (%s), which no text there names any more: drop it", key[1], key[0], why)
		}
	}
	for file := range reportFiles {
		if !seenReports[file] {
			t.Errorf("reportFiles lists %s, which is no library file", file)
		}
	}
}

// reportFiles are the library files whose texts are the command's own
// reports, printed to the user as they are: they may name flags
// (their errors may not).
var reportFiles = map[string]string{
	"launcher/dryrun.go":              "--dry-run's report: the flags the scheduler set",
	"launcher/summary.go":             "the failure summary",
	"launcher/goodput/goodputtext.go": "gorun report's text",
	"launcher/probe/verdict.go":       "the hang verdict's lines in the summary",
	"launcher/lifewatch.go":           "the hang verdict's lines in the summary",
	"launcher/hangjob.go":             "the job-wide hang verdict's lines",
	"launcher/agent.go":               "why the agent does not restart, logged",
	"launcher/policy.go":              "why an exit code ends the job, logged and in the summary",
	"launcher/numa.go":                "the binding's notes, logged",
	"topology/advice.go":              "gorun plan's advice",
	"topology/config.go":              "gorun plan --help's keys",
}

// flagFormat finds a flag's name formatted into a text: "--%s", "--%v".
var flagFormat = regexp.MustCompile(`--%[sqv]`)

// logMethods are the methods of a logger (logrus's, log's) whose lines
// may name flags.
var logMethods = map[string]bool{
	"Debugf": true, "Infof": true, "Warnf": true, "Warningf": true, "Errorf": true, "Printf": true,
	"Debug": true, "Info": true, "Warn": true, "Warning": true, "Error": true, "Print": true, "Println": true,
}

// isLogCall reports whether call is a logger's method (a log line), not
// a package's function (fmt.Errorf, errors.New, setting.Errorf).
func isLogCall(call *ast.CallExpr, imports map[string]string) bool {
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok || !logMethods[sel.Sel.Name] {
		return false
	}
	if id, ok := sel.X.(*ast.Ident); ok {
		if _, pkg := imports[id.Name]; pkg {
			return false // a package's function
		}
	}
	return true
}

// contains reports whether outer's source range holds inner's.
func contains(outer, inner ast.Node) bool {
	return outer.Pos() <= inner.Pos() && inner.End() <= outer.End()
}

// TestUsersReadFlags: the library's errors name settings, and the
// command line shows the flags instead, wherever the error is wrapped,
// keeping the context around it, the exit code, and what errors.Is and
// As find.
func TestUsersReadFlags(t *testing.T) {
	t.Parallel()
	cfg := launcher.NewConfig()
	cfg.Entrypoint.Script, cfg.HangTimeout = "train.py", -time.Second
	hang := cfg.Validate()
	_, static := rendezvous.NewStatic(rendezvous.StaticConfig{RunID: "j", NNodes: 2, NodeRank: 5, MasterAddr: "h", MasterPort: 1})
	runID := rendezvous.ValidateRunID("a/b")
	_, dir := launcher.ResolveLogDir("\x00") // lstat: invalid argument
	for _, tt := range []struct {
		name      string
		err       error
		own, user string
		code      int
		is        error
	}{
		{"usage", Usage(hang), "HangTimeout: -1s, want 0 (off) or more", "--hang-timeout: -1s, want 0 (off) or more", 2, nil},
		{"two settings", Usage(static), "rendezvous: static: NodeRank 5 outside 0..1 (NNodes=2)", "rendezvous: static: --node-rank 5 outside 0..1 (--nnodes=2)", 2, nil},
		{"a sentinel kept", Usage(runID), `invalid run id: RunID="a/b": character '/' at 1; a run id names a folder and store keys: anything but '/' and control characters`,
			`invalid run id: --rdzv-id="a/b": character '/' at 1; a run id names a folder and store keys: anything but '/' and control characters`, 2, rendezvous.ErrInvalidRunID},
		{"wrapped, then usage", Usage(fmt.Errorf("joining the job: %w", static)), "joining the job: rendezvous: static: NodeRank 5 outside 0..1 (NNodes=2)",
			"joining the job: rendezvous: static: --node-rank 5 outside 0..1 (--nnodes=2)", 2, nil},
		{"a backend's bad input", ExitError(fmt.Errorf("rendezvous: %w", rendezvous.BadInput(runID)), 1), `rendezvous: invalid run id: RunID="a/b"`,
			`rendezvous: invalid run id: --rdzv-id="a/b"`, 2, rendezvous.ErrInvalidConfig},
		{"not usage, with a cause", ExitError(fmt.Errorf("start: %w", dir), 1), "start: LogDir: lstat ", "start: --log-dir: lstat ", 1, syscall.EINVAL},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var u *UsageError
			var ec cli.ExitCoder
			var bad *setting.Error
			if !errors.As(tt.err, &ec) || ec.ExitCode() != tt.code {
				t.Errorf("exit code: %v; want %d", ec, tt.code)
			}
			if !errors.As(tt.err, &bad) {
				t.Fatalf("%v wraps no setting.Error", tt.err)
			}
			if errors.As(tt.err, &u) {
				if got := u.Err.Error(); !strings.HasPrefix(got, tt.own) {
					t.Errorf("the library's text %q; want it to start with %q", got, tt.own)
				}
			}
			if got := tt.err.Error(); !strings.HasPrefix(got, tt.user) {
				t.Errorf("the user reads %q; want it to start with %q", got, tt.user)
			}
			if tt.is != nil && !errors.Is(tt.err, tt.is) {
				t.Errorf("%v is not %v", tt.err, tt.is)
			}
		})
	}
}
