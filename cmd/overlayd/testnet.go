package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/testnet"
)

func testnetCommand() *cli.Command {
	d := testnet.DefaultConfig()
	return &cli.Command{
		Name:  "testnet",
		Usage: "local test networks",
		Subcommands: []*cli.Command{{
			Name:  "run",
			Usage: "start an in-process network on 127.0.0.1, show it forming, print every directory, stop",
			Flags: []cli.Flag{
				&cli.IntFlag{Name: "supernodes", Usage: "supernodes to start", Value: d.Supernodes},
				&cli.IntFlag{Name: "clients", Usage: "ordinary nodes to start", Value: d.Clients},
				&cli.IntFlag{Name: "capacity", Usage: "capacity of each supernode", Value: d.Capacity},
				&cli.DurationFlag{Name: "interval", Usage: "announce interval", Value: d.AnnounceInterval},
				&cli.Uint64Flag{Name: "seed", Usage: "seed of the network's random choices", Value: d.Seed},
				&cli.DurationFlag{Name: "timeout", Usage: "give up if the network has not formed by then", Value: time.Minute},
			},
			Action: func(c *cli.Context) error {
				cfg := testnet.Config{
					Supernodes:       c.Int("supernodes"),
					Clients:          c.Int("clients"),
					Capacity:         c.Int("capacity"),
					AnnounceInterval: c.Duration("interval"),
					Seed:             c.Uint64("seed"),
				}
				if err := cfg.Validate(); err != nil {
					return usageError{err}
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
				defer cancel()
				return tour(ctx, c.App.Writer, cfg)
			},
		}},
	}
}

// tour starts a network, shows it converging and prints what each node sees.
func tour(ctx context.Context, w io.Writer, cfg testnet.Config) error {
	fmt.Fprintf(w, "testnet: seed %d, %d supernodes (capacity %d) and %d ordinary nodes on 127.0.0.1, announce interval %v\n",
		cfg.Seed, cfg.Supernodes, cfg.Capacity, cfg.Clients, cfg.AnnounceInterval)
	start := time.Now()
	net, err := testnet.Start(ctx, cfg)
	if err != nil {
		return err
	}
	defer net.Close()
	fmt.Fprintf(w, "started %d nodes in %v\n", len(net.All()), time.Since(start).Round(time.Millisecond))
	err = net.WaitConverged(ctx, func(complete, total int) {
		fmt.Fprintf(w, "  %6.2fs  %d/%d nodes see every supernode\n", time.Since(start).Seconds(), complete, total)
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "converged in %v: every node lists all %d supernodes and agrees on the ring\n\n",
		time.Since(start).Round(time.Millisecond), cfg.Supernodes)
	for i, nd := range net.All() {
		role := "ordinary"
		if i < cfg.Supernodes {
			role = "supernode"
		}
		st := nd.Status()
		fmt.Fprintf(w, "== %s %s: %d peers, ring %s\n", role, st.PeerID, st.ConnectedPeers, orDash(st.RingVersion))
		writeSupernodes(w, nd.Supernodes())
		fmt.Fprintln(w)
	}
	r := net.All()[0].RingInfo()
	fmt.Fprintf(w, "ring: %d members, %d points, CV %.2f%%\n", r.Members, r.Points, 100*r.CV)
	fmt.Fprintln(w, "stopping")
	return nil
}
