package companion

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/cmdline"
	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/storecmd"
	"github.com/gorun-dev/gorun/internal/sys/private"
	"github.com/gorun-dev/gorun/internal/sys/tempdir"
	"github.com/gorun-dev/gorun/internal/workerenv"
	"github.com/gorun-dev/gorun/rendezvous"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobauth"
	"github.com/gorun-dev/gorun/rendezvous/etcd/jobstore"
)

// StoreCommand is `gorun store`: an embedded etcd server for people who
// have none, serving until SIGINT or SIGTERM.
func (e *Commands) StoreCommand() *cli.Command {
	return &cli.Command{
		Name:   "store",
		Usage:  "run an embedded etcd server for multi-node jobs (--rdzv-backend=etcd --rdzv-endpoint=HOST:PORT)",
		Flags:  storeFlags(),
		Action: storeAction,
	}
}

// storeFlags are gorun store's flags.
func storeFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: storecmd.Listen, Value: "127.0.0.1:2379", Usage: "client address host:port (use the host's address to serve other machines)", EnvVars: []string{"GORUN_STORE_LISTEN"}},
		&cli.StringFlag{Name: storecmd.PeerListen, Value: "127.0.0.1:0", Usage: "peer address host:port (one member: unused by clients)"},
		&cli.StringFlag{Name: storecmd.DataDir, Usage: "data directory (default: a temporary one, removed on exit)", EnvVars: []string{"GORUN_STORE_DATA_DIR"}},
		&cli.StringFlag{Name: storecmd.LogLevel, Value: "warn", Usage: "etcd's log level: debug, info, warn, error, panic"},
		&cli.StringFlag{Name: storecmd.TokenFile, Usage: "the jobs' token (created, mode 0600, when absent); GORUN_RDZV_TOKEN holds it otherwise. Clients log in as user gorun with a password derived from it", EnvVars: []string{rendezvous.TokenFileEnv}},
		&cli.StringFlag{Name: storecmd.Prefix, Value: jobstore.DefaultPrefix, Usage: "the key prefix the jobs' user may read and write (--rdzv-conf etcd_prefix)"},
		&cli.BoolFlag{Name: "no-auth", Usage: "serve without authentication: anyone who reaches the port reads and writes every key"},
		&cli.StringFlag{Name: storecmd.Cert, Usage: "TLS certificate of the client port (with --key)"},
		&cli.StringFlag{Name: storecmd.Key, Usage: "TLS key of the client port"},
		&cli.StringFlag{Name: storecmd.CACert, Usage: "CA that clients' certificates must be signed by (mutual TLS)"},
		&cli.StringFlag{Name: storecmd.Cluster, Usage: "the peer addresses host:port of a store of 3, 5 or 7 members, in the same order on every member (each member serves clients at its --listen; peers authenticate each other with the token)"},
		&cli.IntFlag{Name: storecmd.Member, Value: -1, Usage: "this member's place (from 0) in --cluster"},
		&cli.StringFlag{Name: storecmd.Join, Usage: "join a running store as the learner --name that its first member added: its members as etcd's initial cluster (name=https://host:port,...; how an agent runs a member its job's store grows by), this member's peers at --peer-listen"},
		&cli.StringFlag{Name: storecmd.Name, Usage: "this member's name in --join"},
		&cli.DurationFlag{Name: storecmd.ReadyTimeout, Value: jobstore.DefaultReadyTimeout, Usage: "how long a member of --cluster waits for a majority of the members to run"},
		&cli.BoolFlag{Name: storecmd.TokenStdin, Usage: "read the jobs' token from standard input (how an agent hands it to the store member it runs)"},
		&cli.BoolFlag{Name: storecmd.StopOnStdinClose, Usage: "ignore stop signals and serve until standard input closes (how an agent runs its store member: a scheduler signals every process of a job, and only the agent may stop the member); with --token-stdin, the token is the first line"},
	}
}

// storeAction serves the store until a stop signal, or, for an agent's
// member (--stop-on-stdin-close), until its standard input ends.
func storeAction(c *cli.Context) error {
	// It holds the jobs' token: no process of the same user (a job's
	// worker, beside an agent's store member) reads it here.
	if err := private.HideSecrets(); err != nil {
		return cli.Exit("gorun store: "+err.Error(), 1)
	}
	cluster, err := checkStoreFlags(c)
	if err != nil {
		return err
	}
	stdin := bufio.NewReader(os.Stdin)
	var stdinToken []byte
	if c.Bool(storecmd.TokenStdin) {
		if c.Bool(storecmd.StopOnStdinClose) {
			// The first line: the end of the input stops the member.
			var line string
			line, err = stdin.ReadString('\n')
			stdinToken = []byte(line)
		} else {
			stdinToken, err = io.ReadAll(io.LimitReader(stdin, 1<<16))
		}
		if err != nil {
			return cmdline.Usagef("gorun store: --token-stdin: %w", err)
		}
	}
	ctx, stop := storeContext(c, stdin)
	defer stop()
	token, password, err := storeSecret(ctx, c, stdinToken, cluster != nil || c.String(storecmd.Join) != "")
	if err != nil {
		return err
	}
	return serveStore(ctx, c, cluster, token, password)
}

// checkStoreFlags checks gorun store's flags and returns --cluster's
// members (nil: a store of one).
func checkStoreFlags(c *cli.Context) ([]string, error) {
	switch c.String(storecmd.LogLevel) {
	case "debug", "info", "warn", "error", "panic":
	default:
		return nil, cmdline.Usagef("--log-level=%q: want debug, info, warn, error or panic", c.String(storecmd.LogLevel))
	}
	if (c.String(storecmd.Cert) == "") != (c.String(storecmd.Key) == "") {
		return nil, cmdline.Usagef("--cert and --key go together")
	}
	var cluster []string
	if v := c.String(storecmd.Cluster); v != "" {
		cluster = strings.Split(v, ",")
		if n := len(cluster); n < 3 || n%2 == 0 || n > 7 {
			return nil, cmdline.Usagef("--cluster: %d members; want 3, 5 or 7 (a store of n members survives the loss of (n-1)/2 of them)", n)
		}
		if m := c.Int(storecmd.Member); m < 0 || m >= len(cluster) {
			return nil, cmdline.Usagef("--member=%d: want this member's place in --cluster, 0 to %d", m, len(cluster)-1)
		}
		if c.Bool("no-auth") {
			return nil, cmdline.Usagef("--cluster needs the jobs' token (its members authenticate each other with it): drop --no-auth")
		}
	} else if c.IsSet(storecmd.Member) {
		return nil, cmdline.Usagef("--member is a place in --cluster: give --cluster too")
	}
	if join := c.String(storecmd.Join); join != "" || c.IsSet(storecmd.Name) {
		switch {
		case cluster != nil:
			return nil, cmdline.Usagef("--join and --cluster: give one (a store's members at its start, or a running store to join)")
		case join == "" || c.String(storecmd.Name) == "":
			return nil, cmdline.Usagef("--join and --name go together")
		case c.Bool("no-auth"):
			return nil, cmdline.Usagef("--join needs the jobs' token (its members authenticate each other with it): drop --no-auth")
		case strings.HasSuffix(c.String(storecmd.PeerListen), ":0"):
			return nil, cmdline.Usagef("--join: give this member's peer address (--peer-listen host:port), as the store added it")
		}
	}
	return cluster, nil
}

// storeContext ends on SIGINT or SIGTERM; for an agent's member
// (--stop-on-stdin-close), which ignores them, when stdin ends instead.
func storeContext(c *cli.Context, stdin io.Reader) (context.Context, context.CancelFunc) {
	if !c.Bool(storecmd.StopOnStdinClose) {
		return signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
	}
	// Slurm's scancel and time limit signal every process of the step,
	// this member too: only its agent stops it, once the workers have
	// saved and left the store.
	signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	ctx, cancel := context.WithCancel(c.Context)
	go func() { // ends with the input, which ends the member
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()
	return ctx, cancel
}

// storeSecret is what the store authenticates clients with: the jobs'
// token (--token-file, GORUN_RDZV_TOKEN, or stdin's), or the launcher's
// --standalone store's password; neither with --no-auth.
func storeSecret(ctx context.Context, c *cli.Context, stdinToken []byte, peered bool) (jobauth.Token, string, error) {
	if c.Bool("no-auth") {
		return nil, "", nil
	}
	tokenFile, tokenText := c.String(storecmd.TokenFile), os.Getenv(rendezvous.TokenEnv)
	if c.Bool(storecmd.TokenStdin) {
		tokenFile, tokenText = "", string(stdinToken)
	}
	password := os.Getenv(workerenv.StorePassword)
	if peered && tokenFile == "" && tokenText == "" {
		return nil, "", cmdline.Usagef("gorun store: --cluster needs the jobs' token, the same on every member (--token-file PATH, GORUN_RDZV_TOKEN or --token-stdin)")
	}
	if tokenFile == "" && tokenText == "" && password == "" {
		return nil, "", cmdline.Usagef("gorun store: give the jobs' token (--token-file PATH, created when absent, or GORUN_RDZV_TOKEN), or --no-auth to serve anyone who reaches the port")
	}
	log := logrus.New()
	log.SetOutput(c.App.ErrWriter)
	if password != "" && !peered {
		return nil, password, nil // the launcher's --standalone store: the password itself
	}
	token, err := jobauth.StoreToken(ctx, setting.Name("TokenFile"), tokenFile, tokenText, log)
	if err != nil {
		return nil, "", cmdline.Usagef("gorun store: %w", err)
	}
	return token, password, nil
}

// serveStore starts the store and serves until ctx ends or the store
// fails.
func serveStore(ctx context.Context, c *cli.Context, cluster []string, token jobauth.Token, password string) error {
	dataDir := c.String(storecmd.DataDir)
	if dataDir == "" {
		// Locked, so that the next gorun sweeps it if this one is
		// killed.
		dir, err := tempdir.New("store")
		if err != nil {
			return cli.Exit("gorun store: data folder: "+err.Error(), 1)
		}
		defer dir.Remove()
		dataDir = dir.Path()
	}
	s, err := jobstore.StartServer(ctx, jobstore.ServerConfig{
		ClientAddr: c.String(storecmd.Listen), PeerAddr: c.String(storecmd.PeerListen),
		Dir: dataDir, LogLevel: c.String(storecmd.LogLevel),
		Token: token, Password: password, AuthPrefix: c.String(storecmd.Prefix),
		CertFile: c.String(storecmd.Cert), KeyFile: c.String(storecmd.Key), TrustedCAFile: c.String(storecmd.CACert),
		Cluster: cluster, Member: c.Int(storecmd.Member), ReadyTimeout: c.Duration(storecmd.ReadyTimeout),
		Join: c.String(storecmd.Join), Name: c.String(storecmd.Name),
	})
	if ctx.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		if errors.Is(err, jobstore.ErrMemberTaken) {
			return cli.Exit(err.Error(), jobstore.MemberTakenExit)
		}
		return cli.Exit(err.Error(), 1)
	}
	defer s.Close()
	switch {
	case cluster != nil:
		// The line an agent running this member waits for.
		_ = storecmd.AnnounceMember(c.App.Writer, fmt.Sprintf("%d of %d", c.Int(storecmd.Member), len(cluster)), s.Endpoints(), "; stop with Ctrl-C")
	case c.String(storecmd.Join) != "":
		_ = storecmd.AnnounceMember(c.App.Writer, c.String(storecmd.Name)+" (joined)", s.Endpoints(), "")
	default:
		fmt.Fprintf(c.App.Writer, "gorun store: etcd serving at %v; stop with Ctrl-C\n", s.Endpoints())
	}
	select {
	case <-ctx.Done():
		return nil
	case err := <-s.Err():
		if err != nil {
			return cli.Exit("gorun store: "+err.Error(), 1)
		}
		return nil
	}
}
