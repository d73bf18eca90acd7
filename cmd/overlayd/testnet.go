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

	"github.com/overlayd/overlayd/node"
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
	fmt.Fprintf(w, "ring: %d members, %d points, CV %.2f%%\n\n", r.Members, r.Points, 100*r.CV)

	if len(net.Clients()) == 0 {
		return nil
	}
	err = net.WaitAttached(ctx, func(attached, total int) {
		fmt.Fprintf(w, "  %6.2fs  %d/%d ordinary nodes attached to a supernode of their home cluster\n", time.Since(start).Seconds(), attached, total)
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, c := range net.Clients() {
		st := c.Status()
		where := "away from home"
		if st.Attachment.Home {
			where = "home cluster"
		}
		fmt.Fprintf(w, "  %s → %s (%s)\n", short(st.PeerID), short(st.Attachment.Supernode), where)
	}
	return demoMessages(ctx, w, net)
}

// short abbreviates a peer ID for display.
func short(id string) string {
	if len(id) <= 12 {
		return id
	}
	return id[:6] + "…" + id[len(id)-6:]
}

// demoMessages sends a direct message between two clients and a group
// message to all of them, and shows the deliveries.
func demoMessages(ctx context.Context, w io.Writer, net *testnet.Network) error {
	clients := net.Clients()
	var ls []*node.Listener
	for _, c := range clients {
		l, err := c.Listen()
		if err != nil {
			return err
		}
		defer l.Close()
		ls = append(ls, l)
		if err := c.JoinGroup("tour"); err != nil {
			return err
		}
	}
	fmt.Fprintln(w)
	if len(clients) >= 2 {
		a, b := clients[0], clients[len(clients)-1]
		t0 := time.Now()
		if _, err := a.Send(ctx, b.ID(), []byte("hello from the tour")); err != nil {
			return fmt.Errorf("direct message: %w", err)
		}
		in := <-ls[len(ls)-1].C
		fmt.Fprintf(w, "direct message %s → %s: %q delivered and acknowledged in %v\n",
			short(a.ID().String()), short(b.ID().String()), in.Text, time.Since(t0).Round(time.Microsecond))
	}
	// Group membership reaches the group's home with the join; wait until
	// the home knows everyone, then publish.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ms, err := clients[0].GroupMembers(ctx, "tour")
		if err == nil && len(ms) == len(clients) {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("group tour: the home knows %d of %d members", len(ms), len(clients))
		}
		time.Sleep(20 * time.Millisecond) // polling a remote view; nothing local to wait on
	}
	t0 := time.Now()
	res, err := clients[0].Publish(ctx, "tour", []byte("hello, group"))
	if err != nil {
		return fmt.Errorf("group publish: %w", err)
	}
	for _, l := range ls {
		select {
		case <-l.C:
		case <-time.After(5 * time.Second):
			return fmt.Errorf("a member did not receive the group message")
		}
	}
	fmt.Fprintf(w, "group message seq %d to %d members: every member received it in %v (one frame per supernode holding members)\n",
		res.Seq, len(clients), time.Since(t0).Round(time.Microsecond))
	return nil
}
