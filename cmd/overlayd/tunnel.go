package main

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
)

// The tunnel commands: expose, unexpose, connect, disconnect, tunnels.

func exposeCommand() *cli.Command {
	return &cli.Command{
		Name:      "expose",
		Usage:     "make a local TCP service reachable by name by chosen peers, through the overlay",
		ArgsUsage: "<name> <local-addr>",
		Description: "Registers the service with the running daemon: peers on the allow-list reach it with\n" +
			"`overlayd connect <this-peer-id>/<name>`, directly or through this node's supernode relay.\n" +
			"The allow-list is checked on the peer's authenticated ID before the service is dialled.\n" +
			"Give --allow once per peer, or --allow-any to let every peer in; exactly one of the two.",
		Flags: []cli.Flag{
			dataDirFlag(), jsonFlag,
			&cli.StringSliceFlag{Name: "allow", Usage: "a peer ID that may connect (repeatable)"},
			&cli.BoolFlag{Name: "allow-any", Usage: "let any peer connect"},
		},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<name>", "<local-addr>")
			if err != nil {
				return err
			}
			allow := c.StringSlice("allow")
			switch {
			case len(allow) == 0 && !c.Bool("allow-any"):
				return usageError{errors.New("expose needs --allow <peer-id> (repeatable) or --allow-any: a service is reachable only by the peers you name")}
			case len(allow) > 0 && c.Bool("allow-any"):
				return usageError{errors.New("give --allow or --allow-any, not both")}
			}
			res, err := localapi.NewClient(c.String("data-dir")).Expose(c.Context,
				localapi.ExposeRequest{Name: a[0], Target: a[1], Allow: allow, AllowAny: c.Bool("allow-any")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, res)
			}
			to := "any peer"
			if !res.AllowAny {
				to = strings.Join(res.Allow, ", ")
			}
			fmt.Fprintf(c.App.Writer, "exposed %s (%s) to %s\n", res.Name, res.Target, to)
			return nil
		},
	}
}

func unexposeCommand() *cli.Command {
	return &cli.Command{
		Name:      "unexpose",
		Usage:     "stop exposing a service and close its open connections",
		ArgsUsage: "<name>",
		Flags:     []cli.Flag{dataDirFlag()},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<name>")
			if err != nil {
				return err
			}
			if err := localapi.NewClient(c.String("data-dir")).Unexpose(c.Context, a[0]); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "unexposed %s\n", a[0])
			return nil
		},
	}
}

func connectCommand() *cli.Command {
	return &cli.Command{
		Name:      "connect",
		Usage:     "open a local listener whose connections are carried to a service another peer exposes",
		ArgsUsage: "<peer-id>/<name>",
		Description: "The daemon listens on --listen (port 0 picks one) and carries each connection it accepts\n" +
			"to the service: directly when it can reach the peer, otherwise through the peer's supernode\n" +
			"relay, moving to a direct connection when hole punching makes one. Prints the address.\n" +
			"`overlayd tunnels` shows the connections and why one failed; `overlayd disconnect` closes it.",
		Flags: []cli.Flag{
			dataDirFlag(), jsonFlag,
			&cli.StringFlag{Name: "listen", Value: "127.0.0.1:0", Usage: "local host:port to listen on"},
		},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<peer-id>/<name>")
			if err != nil {
				return err
			}
			p, name, ok := strings.Cut(a[0], "/")
			if !ok || p == "" || name == "" {
				return usageError{fmt.Errorf("%q: want <peer-id>/<name>", a[0])}
			}
			res, err := localapi.NewClient(c.String("data-dir")).Connect(c.Context,
				localapi.ConnectRequest{Peer: p, Service: name, Listen: c.String("listen")})
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, res)
			}
			fmt.Fprintf(c.App.Writer, "listening on %s -> %s/%s\n", res.Listen, res.Peer, res.Service)
			return nil
		},
	}
}

func disconnectCommand() *cli.Command {
	return &cli.Command{
		Name:      "disconnect",
		Usage:     "close a connect listener and its open connections",
		ArgsUsage: "<listen-addr>",
		Flags:     []cli.Flag{dataDirFlag()},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<listen-addr>")
			if err != nil {
				return err
			}
			if err := localapi.NewClient(c.String("data-dir")).Disconnect(c.Context, a[0]); err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "disconnected %s\n", a[0])
			return nil
		},
	}
}

func tunnelsCommand() *cli.Command {
	return queryCommand("tunnels", "list exposed services and connect listeners, with their connections and bytes",
		(*localapi.Client).Tunnels, writeTunnels)
}

func writeTunnels(w io.Writer, t localapi.Tunnels) {
	if len(t.Exposed) == 0 && len(t.Connects) == 0 {
		fmt.Fprintln(w, "no tunnels")
		return
	}
	for _, s := range t.Exposed {
		to := "any peer"
		if !s.AllowAny {
			to = strings.Join(s.Allow, ", ")
		}
		fmt.Fprintf(w, "expose %s -> %s\tallow %s\n", s.Name, s.Target, to)
		fmt.Fprintf(w, "  connections %d open, %d total; bytes in %d, out %d; refused %d, busy %d, unavailable %d\n",
			s.Open, s.Total, s.BytesIn, s.BytesOut, s.Refused, s.Busy, s.Unavailable)
		writeConns(w, s.Conns)
	}
	for _, c := range t.Connects {
		fmt.Fprintf(w, "connect %s -> %s/%s\n", c.Listen, c.Peer, c.Service)
		fmt.Fprintf(w, "  connections %d open, %d total, %d failed; bytes in %d, out %d; migrations %d, relay cuts %d\n",
			c.Open, c.Total, c.Failed, c.BytesIn, c.BytesOut, c.Migrations, c.RelayCuts)
		if c.LastError != "" {
			fmt.Fprintf(w, "  last error: %s\n", c.LastError)
		}
		writeConns(w, c.Conns)
	}
}

func writeConns(w io.Writer, cs []localapi.TunnelConn) {
	for _, c := range cs {
		fmt.Fprintf(w, "  %s %s %s: in %d, out %d, buffered %d (max %d), moved %d\n",
			c.ID[:8], c.Peer, c.Path, c.BytesIn, c.BytesOut, c.Buffered, c.MaxBuffered, c.Migration)
	}
}
