package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
)

var jsonFlag = &cli.BoolFlag{Name: "json", Usage: "print JSON"}

// queryCommand is a read command: it asks the daemon of --data-dir for one
// thing and prints it as text or, with --json, as JSON.
func queryCommand[T any](name, usage string, get func(*localapi.Client, context.Context) (T, error), text func(io.Writer, T)) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: []cli.Flag{dataDirFlag(), jsonFlag},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("%s takes no arguments, got %q", name, c.Args().Slice())}
			}
			v, err := get(localapi.NewClient(c.String("data-dir")), c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				enc := json.NewEncoder(c.App.Writer)
				enc.SetIndent("", "  ")
				return enc.Encode(v)
			}
			text(c.App.Writer, v)
			return nil
		},
	}
}

func statusCommand() *cli.Command {
	return queryCommand("status", "show the daemon's identity, role and health", (*localapi.Client).Status,
		func(w io.Writer, s localapi.Status) {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintf(tw, "peer ID\t%s\n", s.PeerID)
			if s.RoleChangedAt != nil {
				fmt.Fprintf(tw, "role\t%s (configured %s) since %s\n", s.Role, s.ConfiguredRole, s.RoleChangedAt.Format(time.TimeOnly))
			} else {
				fmt.Fprintf(tw, "role\t%s (configured %s)\n", s.Role, s.ConfiguredRole)
			}
			if s.RoleReason != "" {
				fmt.Fprintf(tw, "why\t%s\n", s.RoleReason)
			}
			for _, c := range s.RoleCriteria {
				mark := "no "
				if c.Held {
					mark = "yes"
				}
				fmt.Fprintf(tw, "  %s\t%s  %s\n", c.Name, mark, c.Detail)
			}
			if s.Relay == nil { // else printRelayStatus shows it
				fmt.Fprintf(tw, "reachability\t%s\n", orDash(s.Reachability))
			}
			fmt.Fprintf(tw, "capacity\t%d\n", s.Capacity)
			fmt.Fprintf(tw, "uptime\t%s\n", (time.Duration(s.UptimeSeconds) * time.Second).String())
			fmt.Fprintf(tw, "connected peers\t%d\n", s.ConnectedPeers)
			fmt.Fprintf(tw, "directory\t%d supernodes\n", s.DirectorySize)
			fmt.Fprintf(tw, "ring version\t%s\n", orDash(s.RingVersion))
			fmt.Fprintf(tw, "version\t%s\n", s.Version)
			if s.Role == "ordinary" || s.Attachment != nil {
				if a := s.Attachment; a != nil {
					where := "away from home cluster"
					if a.Home {
						where = "home cluster"
					}
					fmt.Fprintf(tw, "attached to\t%s (%s) since %s, %d failovers\n", a.Supernode, where, a.Since.Format(time.TimeOnly), s.Failovers)
				} else {
					fmt.Fprintf(tw, "attached to\t- (not attached; %d failovers)\n", s.Failovers)
				}
			}
			if m := s.Mega; m != nil {
				fmt.Fprintf(tw, "mega certificate\tserial %d, capacity %d, valid %s to %s\n", m.Serial, m.Capacity,
					m.NotBefore.UTC().Format(time.RFC3339), m.NotAfter.UTC().Format(time.RFC3339))
			}
			if len(s.Semaphores) > 0 {
				fmt.Fprintf(tw, "attached clients\t%d\n", s.AttachedClients)
				for _, m := range s.Semaphores {
					fmt.Fprintf(tw, "semaphore %s\t%d/%d in use, %d acquired, %d refused\n", m.Name, m.InUse, m.Max, m.Acquired, m.Refused)
				}
			}
			if o := s.OfflineStore; o != nil {
				fmt.Fprintf(tw, "offline store	%d messages for %d peers, %d of %d bytes\n", o.Messages, o.Recipients, o.Bytes, o.MaxBytes)
			}
			if l := s.NoLoss; l != nil {
				fmt.Fprintf(tw, "group replay logs\t%d groups, %d messages, %d bytes\n", l.ReplayGroups, l.ReplayMessages, l.ReplayBytes)
				fmt.Fprintf(tw, "group resumes\t%d served (%d with a gap), %d frames replayed; %d replicas held, %d publishes not replicated in time\n",
					l.ResumesDone, l.ResumesWithGap, l.FramesReplayed, l.ReplicasHeld, l.ReplicationTimeouts)
				fmt.Fprintf(tw, "offline messages\t%d stored, %d forwarded, %d acked, %d expired, %d refused\n",
					l.OfflineStored, l.OfflineForwarded, l.OfflineAcked, l.OfflineExpired, l.OfflineRefused)
			}
			printRelayStatus(tw, s.Relay) // ping.go
			for i, r := range s.Refusals {
				label := ""
				if i == 0 {
					label = "refused"
				}
				what := r.Metric
				if r.Labels != "" {
					what += "{" + r.Labels + "}"
				}
				fmt.Fprintf(tw, "%s\t%d %s\n", label, r.Count, what)
			}
			for i, a := range s.Addrs {
				label := ""
				if i == 0 {
					label = "addresses"
				}
				fmt.Fprintf(tw, "%s\t%s\n", label, a)
			}
			tw.Flush()
		})
}

func peersCommand() *cli.Command {
	return queryCommand("peers", "list connected peers", (*localapi.Client).Peers,
		func(w io.Writer, ps []localapi.Peer) {
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "PEER\tDIRECTION\tKIND\tADDRESS")
			attached := 0
			for _, p := range ps {
				kind := "peer"
				switch {
				case p.Attached:
					kind = "attached client since " + p.AttachedSince.Format(time.TimeOnly)
					attached++
				case p.Supernode:
					kind = "supernode"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.ID, p.Direction, kind, strings.Join(p.Addrs, ","))
			}
			tw.Flush()
			fmt.Fprintf(w, "%d peers, %d attached clients\n", len(ps), attached)
		})
}

func supernodesCommand() *cli.Command {
	return queryCommand("supernodes", "list the supernode directory as this node sees it", (*localapi.Client).Supernodes,
		func(w io.Writer, ss []localapi.Supernode) {
			writeSupernodes(w, ss)
		})
}

func writeSupernodes(w io.Writer, ss []localapi.Supernode) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUPERNODE\tROLE\tLOAD/CAP\tSPARE\tLAST SEEN\tADDRESS")
	for _, s := range ss {
		self := ""
		if s.Self {
			self = " (self)"
		}
		addr := ""
		if len(s.Addrs) > 0 {
			addr = s.Addrs[0]
		}
		role := s.Role
		if s.MegaUntil != nil {
			role += " until " + s.MegaUntil.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s%s\t%s\t%d/%d\t%d\t%s\t%s\n", s.ID, self, role, s.Load, s.Capacity,
			s.Spare, s.LastSeen.Format(time.TimeOnly), addr)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d supernodes\n", len(ss))
}

func ringCommand() *cli.Command {
	return queryCommand("ring", "show the live cluster ring: members, weights, points, shares, balance", (*localapi.Client).Ring,
		func(w io.Writer, r localapi.Ring) {
			if r.Members == 0 {
				fmt.Fprintln(w, "no ring: the directory has no supernode yet")
				return
			}
			fmt.Fprintf(w, "version %s: %d members, %d points (%d per unit of weight), %d collisions, CV %.2f%%\n",
				r.Version, r.Members, r.Points, r.PointsPerWeight, r.Collisions, 100*r.CV)
			tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "MEMBER\tWEIGHT\tPOINTS\tSHARE\tFAIR\tRATIO")
			for _, m := range r.Shares {
				fmt.Fprintf(tw, "%s\t%d\t%d\t%.2f%%\t%.2f%%\t%.3f\n", m.ID, m.Weight, m.Points, 100*m.Share, 100*m.Fair, m.Ratio)
			}
			tw.Flush()
		})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
