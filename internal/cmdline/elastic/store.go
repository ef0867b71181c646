package elastic

import (
	"fmt"
	"os/signal"
	"syscall"

	"github.com/urfave/cli/v2"

	etcdrdzv "github.com/gorun-dev/gorun/rendezvous/etcd"
)

// StoreCommand is `gorun store`: an embedded etcd server for people who
// have none, serving until SIGINT or SIGTERM.
func (e *Elastic) StoreCommand() *cli.Command {
	return &cli.Command{
		Name:  "store",
		Usage: "run an embedded etcd server for multi-node jobs (--rdzv-backend=etcd --rdzv-endpoint=HOST:PORT)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:2379", Usage: "client address host:port (use the host's address to serve other machines)", EnvVars: []string{"GORUN_STORE_LISTEN"}},
			&cli.StringFlag{Name: "peer-listen", Value: "127.0.0.1:0", Usage: "peer address host:port (one member: unused by clients)"},
			&cli.StringFlag{Name: "data-dir", Usage: "data directory (default: a temporary one, removed on exit)", EnvVars: []string{"GORUN_STORE_DATA_DIR"}},
			&cli.StringFlag{Name: "log-level", Value: "warn", Usage: "etcd's log level: debug, info, warn, error, panic"},
		},
		Action: func(c *cli.Context) error {
			switch c.String("log-level") {
			case "debug", "info", "warn", "error", "panic":
			default:
				return cli.Exit(fmt.Sprintf("--log-level=%q: want debug, info, warn, error or panic", c.String("log-level")), 2)
			}
			ctx, stop := signal.NotifyContext(c.Context, syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			s, err := etcdrdzv.StartServer(ctx, etcdrdzv.ServerConfig{
				ClientAddr: c.String("listen"), PeerAddr: c.String("peer-listen"),
				Dir: c.String("data-dir"), LogLevel: c.String("log-level"),
			})
			if ctx.Err() != nil {
				return nil // stopped while starting
			}
			if err != nil {
				return cli.Exit(err.Error(), 1)
			}
			defer s.Close()
			fmt.Fprintf(c.App.Writer, "gorun store: etcd serving at %v; stop with Ctrl-C\n", s.Endpoints())
			select {
			case <-ctx.Done():
				return nil
			case err := <-s.Err():
				if err != nil {
					return cli.Exit("gorun store: "+err.Error(), 1)
				}
				return nil
			}
		},
	}
}
