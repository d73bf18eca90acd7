package main

import (
	"fmt"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/datadir"
)

// identityOutput is what `overlayd identity --json` prints.
type identityOutput struct {
	PeerID  string `json:"peer_id"`
	DataDir string `json:"data_dir"`
}

func identityCommand() *cli.Command {
	return &cli.Command{
		Name:  "identity",
		Usage: "print the peer ID of --data-dir, creating its identity key (0600) if missing (offline: no daemon needed)",
		Description: "Reads <data-dir>/identity.key, or creates it as `overlayd run` would (the data dir 0700,\n" +
			"the key 0600, never overwriting), and prints the node's peer ID. Use it to know a node's\n" +
			"peer ID before it first runs: bootstrap addresses and mega-supernode certificates need it.",
		Flags: []cli.Flag{dataDirFlag(), jsonFlag},
		Action: func(c *cli.Context) error {
			if c.Args().Len() > 0 {
				return usageError{fmt.Errorf("identity takes no arguments, got %q", c.Args().Slice())}
			}
			dir := c.String("data-dir")
			k, err := datadir.LoadOrCreateKey(dir)
			if err != nil {
				return err
			}
			id, err := peer.IDFromPrivateKey(k)
			if err != nil {
				return fmt.Errorf("peer ID of %s: %w", dir, err)
			}
			if c.Bool("json") {
				return printJSON(c, identityOutput{PeerID: id.String(), DataDir: dir})
			}
			fmt.Fprintln(c.App.Writer, id)
			return nil
		},
	}
}
