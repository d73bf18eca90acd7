package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
)

func pingCommand() *cli.Command {
	return &cli.Command{
		Name:      "ping",
		Usage:     "reach a peer, through its supernode's relay when there is no direct connection, and ping it",
		ArgsUsage: "<peer-id>",
		Description: "Asks this node's supernode where the peer is attached, connects through that supernode's\n" +
			"circuit relay (/p2p/<supernode>/p2p-circuit/p2p/<peer>) and runs libp2p ping over the relayed\n" +
			"connection. Then it waits up to --wait for hole punching (DCUtR) to open a direct connection\n" +
			"and, if it does, pings again over it. Prints the path (relayed or direct) and round-trip times.",
		Flags: []cli.Flag{
			dataDirFlag(), jsonFlag,
			&cli.IntFlag{Name: "count", Value: 3, Usage: "pings per path (1 to 20)"},
			&cli.DurationFlag{Name: "wait", Value: 3 * time.Second, Usage: "how long to wait for a direct connection after the relayed pings (0: do not wait)"},
		},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<peer-id>")
			if err != nil {
				return err
			}
			if n := c.Int("count"); n < 1 || n > 20 {
				return usageError{fmt.Errorf("--count %d: must be within [1, 20]", n)}
			}
			if w := c.Duration("wait"); w < 0 || w > time.Minute {
				return usageError{fmt.Errorf("--wait %v: must be within [0, 1m]", w)}
			}
			req := localapi.PingRequest{Peer: a[0], Count: c.Int("count"), WaitMs: int(c.Duration("wait") / time.Millisecond)}
			resp, err := localapi.NewClient(c.String("data-dir")).Ping(c.Context, req)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, resp)
			}
			w := c.App.Writer
			if resp.Relay != "" {
				fmt.Fprintf(w, "connected %s through relay %s in %.1f ms\n", resp.Peer, resp.Relay, resp.ConnectMs)
			}
			fmt.Fprintf(w, "%s via %s: rtt %s ms\n", resp.Path, resp.Addr, joinMs(resp.RTTMs))
			switch {
			case resp.BecameDirect && len(resp.DirectRTTMs) > 0:
				fmt.Fprintf(w, "became direct via %s: rtt %s ms\n", resp.DirectAddr, joinMs(resp.DirectRTTMs))
			case resp.BecameDirect:
				fmt.Fprintln(w, "became direct (ping over it failed)")
			case resp.Path == "relayed":
				fmt.Fprintf(w, "still relayed after %v (no direct connection)\n", c.Duration("wait"))
			}
			return nil
		},
	}
}

func joinMs(v []float64) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = fmt.Sprintf("%.2f", x)
	}
	return strings.Join(s, " ")
}

// printRelayStatus adds the reachability and relay lines to the status.
func printRelayStatus(w io.Writer, r *localapi.Relay) {
	if r == nil {
		return
	}
	fmt.Fprintf(w, "reachability\t%s\n", strings.ToLower(r.Reachability))
	if sv := r.Service; sv != nil {
		fmt.Fprintf(w, "relay service\t%d/%d reservations (%d per IP), %d/%d circuits, refused: %d reservation, %d circuit, %d not attached\n",
			sv.Reservations, sv.MaxReservations, sv.PerIP, sv.Circuits, sv.MaxCircuits,
			r.Refused["reservation"], r.Refused["circuit"], r.Refused["not_attached"])
	}
	if rv := r.Reservation; rv != nil {
		fmt.Fprintf(w, "relay reservation\ton %s until %s\n", rv.Relay, rv.Expires.Format(time.TimeOnly))
		for _, a := range rv.Addrs {
			fmt.Fprintf(w, "relayed address\t%s\n", a)
		}
	}
}
