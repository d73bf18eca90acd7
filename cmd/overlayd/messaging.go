package main

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"text/tabwriter"

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

// pathEscape escapes a group name for a URL path segment.
func pathEscape(s string) string { return url.PathEscape(s) }

func printJSON(c *cli.Context, v any) error {
	enc := json.NewEncoder(c.App.Writer)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send a direct message to a peer and wait for its acknowledgement",
		ArgsUsage: "<peer-id> <text>",
		Description: "The message goes through this node's supernode to the recipient's supernode and the\n" +
			"recipient, which acknowledges it; it is retried on timeout and delivered once. Exit status 1\n" +
			"with the reason when it could not be delivered (recipient offline, unreachable, busy).",
		Flags: []cli.Flag{dataDirFlag(), jsonFlag},
		Action: func(c *cli.Context) error {
			a, err := args(c, "<peer-id>", "<text>")
			if err != nil {
				return err
			}
			var resp localapi.SendResponse
			if err := localapi.NewClient(c.String("data-dir")).Post(c.Context, "/v1/send", localapi.SendRequest{To: a[0], Text: a[1]}, &resp); err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, resp)
			}
			fmt.Fprintf(c.App.Writer, "delivered %s\n", resp.ID)
			return nil
		},
	}
}

func listenCommand() *cli.Command {
	return &cli.Command{
		Name:  "listen",
		Usage: "print inbound direct and group messages as JSON lines until interrupted",
		Flags: []cli.Flag{dataDirFlag()},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("listen takes no arguments")}
			}
			return localapi.NewClient(c.String("data-dir")).Listen(c.Context, func(m json.RawMessage) error {
				_, err := fmt.Fprintf(c.App.Writer, "%s\n", m)
				return err
			})
		},
	}
}

func groupCommand() *cli.Command {
	post := func(name, usage string) *cli.Command {
		return &cli.Command{
			Name: name, Usage: usage, ArgsUsage: "<group>",
			Flags: []cli.Flag{dataDirFlag()},
			Action: func(c *cli.Context) error {
				a, err := args(c, "<group>")
				if err != nil {
					return err
				}
				return localapi.NewClient(c.String("data-dir")).Post(c.Context, "/v1/groups/"+pathEscape(a[0])+"/"+name, struct{}{}, &struct{}{})
			},
		}
	}
	return &cli.Command{
		Name:  "group",
		Usage: "join, leave, publish to and list groups",
		Subcommands: []*cli.Command{
			post("join", "join a group (kept across failovers until leave)"),
			post("leave", "leave a group"),
			{
				Name: "publish", Usage: "publish a message to every member of a group", ArgsUsage: "<group> <text>",
				Flags: []cli.Flag{dataDirFlag(), jsonFlag},
				Action: func(c *cli.Context) error {
					a, err := args(c, "<group>", "<text>")
					if err != nil {
						return err
					}
					var resp localapi.PublishResponse
					if err := localapi.NewClient(c.String("data-dir")).Post(c.Context, "/v1/groups/"+pathEscape(a[0])+"/publish", localapi.SendRequest{Text: a[1]}, &resp); err != nil {
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
					var resp localapi.GroupMembers
					if err := localapi.NewClient(c.String("data-dir")).Get(c.Context, "/v1/groups/"+pathEscape(a[0])+"/members", &resp); err != nil {
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
					var gs []string
					if err := localapi.NewClient(c.String("data-dir")).Get(c.Context, "/v1/groups", &gs); err != nil {
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
