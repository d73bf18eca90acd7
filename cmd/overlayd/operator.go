package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
)

// readOperatorKey loads an operator private key file written by keygen.
func readOperatorKey(path string) (crypto.PrivKey, error) {
	if path == "" {
		return nil, usageError{errors.New("--key is required")}
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, usageError{fmt.Errorf("--key %s: %v", path, err)}
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("operator key %s has mode %04o: others must not read it (chmod 600 %s)", path, st.Mode().Perm(), path)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	k, err := crypto.UnmarshalPrivateKey(b)
	if err != nil {
		return nil, fmt.Errorf("operator key %s is not a key file written by `overlayd operator keygen`: %v", path, err)
	}
	if k.Type() != crypto.Ed25519 {
		return nil, fmt.Errorf("operator key %s is not Ed25519", path)
	}
	return k, nil
}

func operatorCommand() *cli.Command {
	return &cli.Command{
		Name:  "operator",
		Usage: "operator keys, mega-supernode and supernode certificates, revocations (offline: no daemon needed)",
		Subcommands: []*cli.Command{
			{
				Name:  "keygen",
				Usage: "write a new Ed25519 operator key (0600, never overwriting) and print its public key",
				Flags: []cli.Flag{&cli.StringFlag{Name: "out", Usage: "key file to create", Value: "operator.key"}},
				Action: func(c *cli.Context) error {
					k, pub, err := crypto.GenerateEd25519Key(rand.Reader)
					if err != nil {
						return err
					}
					b, err := crypto.MarshalPrivateKey(k)
					if err != nil {
						return err
					}
					out := c.String("out")
					f, err := os.OpenFile(out, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
					if err != nil {
						if errors.Is(err, os.ErrExist) {
							return fmt.Errorf("%s exists: refusing to overwrite an operator key", out)
						}
						return err
					}
					if _, err := f.Write(b); err != nil {
						f.Close()
						os.Remove(out)
						return err
					}
					if err := f.Close(); err != nil {
						return err
					}
					s, err := protocol.EncodeKey(pub)
					if err != nil {
						return err
					}
					abs, _ := filepath.Abs(out)
					fmt.Fprintf(c.App.ErrWriter, "wrote %s; give nodes --operator-pubkey with this public key:\n", abs)
					fmt.Fprintln(c.App.Writer, s)
					return nil
				},
			},
			{
				Name:    "promote",
				Aliases: []string{"cert"},
				Usage:   "print a certificate for a peer, signed by the operator key: a mega-supernode's (--role mega, the default) or a supernode's for a certified network (--role supernode); also `operator cert`",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "key", Usage: "operator key file", Required: true},
					&cli.StringFlag{Name: "peer", Usage: "peer ID of the node to promote", Required: true},
					&cli.StringFlag{Name: "role", Usage: "mega (a mega-supernode certificate) or supernode (a supernode certificate: run the node with --supernode-cert)", Value: "mega"},
					&cli.DurationFlag{Name: "ttl", Usage: "validity from now", Value: 24 * time.Hour},
					&cli.IntFlag{Name: "capacity", Usage: "capacity the mega-supernode takes; with --role supernode the ceiling of the supernode's capacity (default 5000 for mega, the run default for supernode)", Value: 5000},
					&cli.Uint64Flag{Name: "serial", Usage: "certificate serial (random when 0)"},
				},
				Action: func(c *cli.Context) error {
					k, err := readOperatorKey(c.String("key"))
					if err != nil {
						return err
					}
					id, err := peer.Decode(c.String("peer"))
					if err != nil {
						return usageError{fmt.Errorf("--peer %q is not a peer ID: %v", c.String("peer"), err)}
					}
					seal, what := protocol.SealMegaCert, "mega-supernode certificate"
					capacity := c.Int("capacity")
					switch c.String("role") {
					case "mega":
					case "supernode":
						seal, what = protocol.SealSupernodeCert, "supernode certificate"
						if !c.IsSet("capacity") {
							capacity = config.Default().Capacity
						}
					default:
						return usageError{fmt.Errorf("--role %q must be mega or supernode", c.String("role"))}
					}
					if capacity < 1 || capacity > 1_000_000 {
						return usageError{fmt.Errorf("--capacity %d must be within [1, 1000000]", capacity)}
					}
					if c.Duration("ttl") <= 0 {
						return usageError{fmt.Errorf("--ttl %v must be positive", c.Duration("ttl"))}
					}
					serial := c.Uint64("serial")
					if serial == 0 {
						serial = protocol.NewSerial()
					}
					now := time.Now()
					b, err := seal(protocol.Cert{Subject: id, Capacity: uint32(capacity),
						NotBefore: now, NotAfter: now.Add(c.Duration("ttl")), Serial: serial}, k)
					if err != nil {
						return err
					}
					fmt.Fprintf(c.App.ErrWriter, "%s serial %d for %s, capacity %d, until %s\n", what, serial, id, capacity, now.Add(c.Duration("ttl")).UTC().Format(time.RFC3339))
					fmt.Fprintln(c.App.Writer, protocol.EncodeBlob(b))
					return nil
				},
			},
			{
				Name:  "revoke",
				Usage: "print a signed revocation of a certificate serial",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "key", Usage: "operator key file", Required: true},
					&cli.Uint64Flag{Name: "serial", Usage: "serial to revoke", Required: true},
					&cli.DurationFlag{Name: "ttl", Usage: "how long nodes keep the revocation: at least the certificate's remaining validity", Value: 7 * 24 * time.Hour},
				},
				Action: func(c *cli.Context) error {
					k, err := readOperatorKey(c.String("key"))
					if err != nil {
						return err
					}
					if c.Uint64("serial") == 0 {
						return usageError{errors.New("--serial must not be 0")}
					}
					now := time.Now()
					b, err := protocol.SealRevocation(c.Uint64("serial"), now, now.Add(c.Duration("ttl")), k)
					if err != nil {
						return err
					}
					fmt.Fprintln(c.App.Writer, protocol.EncodeBlob(b))
					return nil
				},
			},
		},
	}
}

// blobFromFile reads a certificate or revocation file ("-" for stdin).
func blobFromFile(path string) (string, error) {
	var b []byte
	var err error
	if path == "-" {
		b, err = readAllStdin()
	} else {
		b, err = os.ReadFile(path)
	}
	if err != nil {
		return "", usageError{fmt.Errorf("--file %s: %v", path, err)}
	}
	return strings.TrimSpace(string(b)), nil
}

func readAllStdin() ([]byte, error) {
	return io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
}

// daemonCertCommand hands the daemon a certificate or revocation read from
// --flag, with apply, and prints the answer as text or, with --json, JSON.
func daemonCertCommand[T any](name, usage, flag string, apply func(*localapi.Client, context.Context, string) (T, error), text func(io.Writer, T)) *cli.Command {
	return &cli.Command{
		Name:  name,
		Usage: usage,
		Flags: []cli.Flag{dataDirFlag(), jsonFlag, &cli.StringFlag{Name: flag, Usage: "file with the text form (- for stdin)", Required: true}},
		Action: func(c *cli.Context) error {
			blob, err := blobFromFile(c.String(flag))
			if err != nil {
				return err
			}
			out, err := apply(localapi.NewClient(c.String("data-dir")), c.Context, blob)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, out)
			}
			text(c.App.Writer, out)
			return nil
		},
	}
}

func promoteCommand() *cli.Command {
	return daemonCertCommand("promote", "make the running supernode a mega-supernode with a certificate, or give it a supernode certificate (no restart)", "cert", (*localapi.Client).Promote,
		func(w io.Writer, st localapi.Status) {
			if st.Mega == nil {
				fmt.Fprintln(w, "done")
				return
			}
			fmt.Fprintf(w, "mega-supernode now: serial %d, capacity %d, until %s\n", st.Mega.Serial, st.Mega.Capacity, st.Mega.NotAfter.UTC().Format(time.RFC3339))
		})
}

func revokeCommand() *cli.Command {
	return daemonCertCommand("revoke", "apply a revocation on the running daemon and spread it to the network", "file", (*localapi.Client).Revoke,
		func(w io.Writer, _ localapi.RevokeResponse) { fmt.Fprintln(w, "done") })
}

func demoteCommand() *cli.Command {
	return &cli.Command{
		Name:  "demote",
		Usage: "return a mega-supernode to a regular supernode, handing extra clients back over --drain-period",
		Flags: []cli.Flag{dataDirFlag(), jsonFlag},
		Action: func(c *cli.Context) error {
			st, err := localapi.NewClient(c.String("data-dir")).Demote(c.Context)
			if err != nil {
				return err
			}
			if c.Bool("json") {
				return printJSON(c, st)
			}
			fmt.Fprintf(c.App.Writer, "demoted: now %s with capacity %d\n", st.Role, st.Capacity)
			return nil
		},
	}
}
