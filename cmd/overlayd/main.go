// Command overlayd is the overlayd daemon and its command-line client.
//
// It is a thin layer: it turns flags, environment variables and the config
// file into a node.Config and calls package node (or testnet); the logic
// lives there. Exit status: 0 on success, 1 when a command fails, 2 on bad
// input (an unknown flag, a bad value, an unreadable config file).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/version"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// usageError marks bad input: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func run(args []string, stdout, stderr io.Writer) int {
	return runApp(newApp(stdout, stderr, version.Build()), args, stderr)
}

// runApp runs app on args (flags may follow positional arguments: see
// reorderArgs) and returns the exit status.
func runApp(app *cli.App, args []string, stderr io.Writer) int {
	err := app.Run(reorderArgs(app, args))
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "overlayd: %v\n", err)
	var ue usageError
	var ce *config.Error
	if errors.As(err, &ue) || errors.As(err, &ce) {
		return 2
	}
	return 1
}

// newApp builds the command tree; v is the build's version, for --version,
// the version command and nothing else (the node reads its own).
func newApp(stdout, stderr io.Writer, v version.Info) *cli.App {
	app := &cli.App{
		Name:    "overlayd",
		Version: v.String(),
		Usage:   "a peer-to-peer overlay network daemon with self-protecting supernodes",
		Description: "overlayd runs a node of an overlay network on libp2p. Most nodes are ordinary;\n" +
			"supernodes carry the network for them and announce themselves in a signed directory.\n" +
			"Start a daemon with `overlayd run`, then ask it with status, peers, supernodes, ring.\n" +
			"`overlayd testnet run` starts a whole network on this machine.\n" +
			"Flags may come before or after a command's arguments; -- ends them (what follows is an argument).",
		Writer:               stdout,
		ErrWriter:            stderr,
		HideHelpCommand:      true,
		EnableBashCompletion: false,
		OnUsageError: func(_ *cli.Context, err error, _ bool) error {
			return usageError{err}
		},
		CommandNotFound: func(c *cli.Context, name string) {
			fmt.Fprintf(stderr, "overlayd: unknown command %q; see overlayd --help\n", name)
			cli.OsExiter(2)
		},
		ExitErrHandler: func(*cli.Context, error) {},
		Commands: []*cli.Command{
			runCommand(),
			statusCommand(),
			peersCommand(),
			supernodesCommand(),
			ringCommand(),
			sendCommand(),
			listenCommand(),
			groupCommand(),
			promoteCommand(),
			demoteCommand(),
			revokeCommand(),
			operatorCommand(),
			identityCommand(),
			pingCommand(),
			exposeCommand(),
			unexposeCommand(),
			connectCommand(),
			disconnectCommand(),
			tunnelsCommand(),
			testnetCommand(),
			versionCommand(v),
			completionCommand(),
		},
	}
	setUsageErrors(app.Commands, app.OnUsageError)
	return app
}

// setUsageErrors makes flag errors of every command usage errors (exit 2).
func setUsageErrors(cmds []*cli.Command, f cli.OnUsageErrorFunc) {
	for _, c := range cmds {
		c.OnUsageError = f
		setUsageErrors(c.Subcommands, f)
	}
}
