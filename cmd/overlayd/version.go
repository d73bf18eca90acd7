package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/version"
)

func versionCommand(v version.Info) *cli.Command {
	return &cli.Command{
		Name:  "version",
		Usage: "print the version, commit and commit time (the same line as --version)",
		Description: "Prints what the build recorded about itself: the module version, the git commit it was\n" +
			"built from (+dirty when the tree had uncommitted changes), the commit time and the Go\n" +
			"toolchain. The libp2p agent version peers see through identify is overlayd/<version>.",
		Flags: []cli.Flag{jsonFlag},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("version takes no arguments, got %q", c.Args().Slice())}
			}
			if c.Bool("json") {
				return printJSON(c, v)
			}
			fmt.Fprintf(c.App.Writer, "%s version %s\n", c.App.Name, v)
			return nil
		},
	}
}
