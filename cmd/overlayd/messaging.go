package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
)

// args checks a command's positional arguments.
func args(c *cli.Context, names ...string) ([]string, error) {
	if c.Args().Len() != len(names) {
		return nil, usageError{fmt.Errorf("%s needs %d arguments: %s", c.Command.Name, len(names), strings.Join(names, " "))}
	}
	return c.Args().Slice(), nil
}

func printJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send a direct message to a peer and wait for its acknowledgement (or its storing, when the peer is offline)",
		ArgsUsage: "<peer-id> <text>",
		Description: "The message goes through this node's supernode to the recipient's supernode and the\n" +
			"recipient, which acknowledges it; it is retried on timeout and delivered once. When the\n" +
			"recipient is attached nowhere, its home cluster stores the message and delivers it when it\n" +
			"attaches (\"stored for <peer>\"). Exit status 1 with the reason when it could be neither\n" +
			"delivered nor stored (over quota, unreachable, busy, offline with no store).",
		Flags: []cli.Flag{dataDirFlag(), jsonFlag},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<peer-id>", "<text>")
			if err != nil {
				return err
			}
			resp, err := localapi.NewClient(c.String("data-dir")).Send(c.Context, a[0], []byte(a[1]))
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, resp)
			}
			if resp.Stored {
				fmt.Fprintf(c.App.Writer, "stored for %s (offline; delivered when it attaches, %s)\n", a[0], resp.Detail)
				return nil
			}
			fmt.Fprintf(c.App.Writer, "delivered %s\n", resp.ID)
			return nil
		},
	}
}

func listenCommand() *cli.Command {
	return &cli.Command{
		Name:  "listen",
		Usage: "print inbound direct and group messages until interrupted (or --count, --timeout)",
		Description: "Prints each inbound message as a readable line on a terminal, and as one JSON line with\n" +
			"--json or when stdout is not a terminal (a pipe, a file). --count N exits 0 after N messages;\n" +
			"--timeout D stops after D: exit 0, or 1 when --count messages had not arrived by then.\n" +
			"With --count, a daemon that ends the stream early is an error too. --ready prints \"ready\"\n" +
			"on stderr once the daemon is listening, for scripts that must not send before then.",
		Flags: []cli.Flag{
			dataDirFlag(),
			&cli.BoolFlag{Name: "json", Usage: "print JSON lines (the default when stdout is not a terminal)"},
			&cli.IntFlag{Name: "count", Usage: "exit after this many messages (0: no limit)"},
			&cli.DurationFlag{Name: "timeout", Usage: "stop listening after this long (0: never); with --count, not getting them all in time is an error"},
			&cli.BoolFlag{Name: "ready", Usage: "print \"ready\" on stderr once the daemon is listening: every message after that line is printed"},
		},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("listen takes no arguments")}
			}
			count, timeout := c.Int("count"), c.Duration("timeout")
			if count < 0 {
				return usageError{fmt.Errorf("--count %d must not be negative", count)}
			}
			if timeout < 0 {
				return usageError{fmt.Errorf("--timeout %v must not be negative", timeout)}
			}
			ctx := c.Context
			if timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, timeout)
				defer cancel()
			}
			got := 0
			var ready func()
			if c.Bool("ready") {
				ready = func() { fmt.Fprintln(c.App.ErrWriter, "ready") }
			}
			asJSON := c.Bool("json") || !isTerminal(c.App.Writer)
			err := localapi.NewClient(c.String("data-dir")).ListenRaw(ctx, ready, func(m json.RawMessage) error {
				line := string(m)
				if !asJSON {
					var in localapi.Inbound
					if err := json.Unmarshal(m, &in); err != nil {
						return fmt.Errorf("listen: decode message: %w", err)
					}
					line = inboundLine(in)
				}
				if _, err := fmt.Fprintln(c.App.Writer, line); err != nil {
					return err
				}
				got++
				if count > 0 && got >= count {
					return errListenDone
				}
				return nil
			})
			timedOut := timeout > 0 && errors.Is(ctx.Err(), context.DeadlineExceeded) && c.Context.Err() == nil
			switch {
			case errors.Is(err, errListenDone):
				return nil
			case timedOut && count > 0:
				return fmt.Errorf("listen: %d of %d messages within --timeout %v", got, count, timeout)
			case timedOut:
				return nil
			case err != nil:
				return err
			case count > 0 && c.Context.Err() == nil:
				return fmt.Errorf("listen: the daemon ended the stream after %d of %d messages", got, count)
			}
			return nil
		},
	}
}

// inboundLine is the readable form of an inbound message, one line:
// "15:04:05 direct from <peer>: <text>", "15:04:05 group <g> #<seq> from
// <peer>: <text>" or "15:04:05 gap: <n> messages dropped". A payload that
// is not printable text shows as its length; text with a newline or tab
// is quoted, so that one message stays one line.
func inboundLine(in localapi.Inbound) string {
	at := in.Time.Local().Format(time.TimeOnly)
	body := fmt.Sprintf("(%d bytes, not text)", len(in.Payload))
	if in.Text != "" || len(in.Payload) == 0 {
		body = in.Text
		if strings.ContainsAny(body, "\n\t\r") {
			body = strconv.Quote(body)
		}
	}
	switch in.Kind {
	case "direct":
		return fmt.Sprintf("%s direct from %s: %s", at, in.From, body)
	case "group":
		return fmt.Sprintf("%s group %s #%d from %s: %s", at, in.Group, in.Seq, in.From, body)
	case "gap":
		return fmt.Sprintf("%s gap: %d messages dropped", at, in.Dropped)
	}
	return fmt.Sprintf("%s %s from %s: %s", at, in.Kind, in.From, body)
}

// errListenDone ends a listen that has printed its --count messages.
var errListenDone = errors.New("listen: enough messages")

func groupCommand() *cli.Command {
	member := func(name, usage string, op func(*localapi.Client, context.Context, string) error) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "<group>",
			Flags: []cli.Flag{dataDirFlag()},
			Action: func(c *cli.Context) error {
				a, err := args(c, "<group>")
				if err != nil {
					return err
				}
				return op(localapi.NewClient(c.String("data-dir")), c.Context, a[0])
			},
		}
	}
	return &cli.Command{
		Name:  "group",
		Usage: "join, leave, publish to and list groups",
		Subcommands: []*cli.Command{
			member("join", "join a group (kept across failovers until leave)", (*localapi.Client).Join),
			member("leave", "leave a group", (*localapi.Client).Leave),
			{
				Name: "publish", Usage: "publish a message to every member of a group", ArgsUsage: "<group> <text>",
				Flags: []cli.Flag{dataDirFlag(), jsonFlag},
				Action: func(c *cli.Context) error {
					a, err := args(c, "<group>", "<text>")
					if err != nil {
						return err
					}
					resp, err := localapi.NewClient(c.String("data-dir")).Publish(c.Context, a[0], []byte(a[1]))
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c, resp)
					}
					fmt.Fprintf(c.App.Writer, "published %s to %s as seq %d (epoch %d)\n", resp.ID, resp.Group, resp.Seq, resp.Epoch)
					return nil
				},
			},
			{
				Name: "members", Usage: "list a group's members, as its home supernode knows them", ArgsUsage: "<group>",
				Flags: []cli.Flag{dataDirFlag(), jsonFlag},
				Action: func(c *cli.Context) error {
					a, err := args(c, "<group>")
					if err != nil {
						return err
					}
					resp, err := localapi.NewClient(c.String("data-dir")).Members(c.Context, a[0])
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c, resp)
					}
					tw := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', 0)
					for _, m := range resp.Members {
						fmt.Fprintln(tw, m)
					}
					tw.Flush()
					fmt.Fprintf(c.App.Writer, "%d members of %s\n", len(resp.Members), resp.Group)
					return nil
				},
			},
			{
				Name: "list", Usage: "list the groups this node has joined",
				Flags: []cli.Flag{dataDirFlag(), jsonFlag},
				Action: func(c *cli.Context) error {
					gs, err := localapi.NewClient(c.String("data-dir")).Groups(c.Context)
					if err != nil {
						return err
					}
					if c.Bool("json") {
						return printJSON(c, gs)
					}
					for _, g := range gs {
						fmt.Fprintln(c.App.Writer, g)
					}
					return nil
				},
			},
		},
	}
}
