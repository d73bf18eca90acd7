package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/protocol"
)

func TestOperatorSupernodeCert(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "op.key")
	pubOut, stderr, code := runBin(t, nil, "operator", "keygen", "--out", key)
	if code != 0 {
		t.Fatalf("keygen: %d %s", code, stderr)
	}
	pub, err := protocol.DecodeKey(pubOut)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []crypto.PubKey{pub}
	const subject = "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"
	id, _ := peer.Decode(subject)
	issue := func(t *testing.T, args ...string) []byte {
		t.Helper()
		out, stderr, code := runBin(t, nil, append([]string{"operator"}, args...)...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		raw, err := protocol.DecodeBlob(out)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}

	t.Run("supernode role, promote and its cert alias", func(t *testing.T) {
		for _, cmd := range []string{"promote", "cert"} {
			raw := issue(t, cmd, "--role", "supernode", "--key", key, "--peer", subject, "--capacity", "40", "--serial", "9")
			c, err := protocol.VerifySupernodeCert(raw, trusted, id, time.Now(), nil)
			if err != nil || c.Capacity != 40 || c.Serial != 9 {
				t.Fatalf("%s: %+v %v", cmd, c, err)
			}
			if _, err := protocol.VerifyMegaCert(raw, trusted, id, time.Now(), nil); protocol.ReasonOf(err) != protocol.CertWrongRole {
				t.Fatalf("%s: a supernode certificate verified as a mega one: %v", cmd, err)
			}
		}
	})
	t.Run("supernode default ceiling is the run default capacity", func(t *testing.T) {
		raw := issue(t, "cert", "--role", "supernode", "--key", key, "--peer", subject)
		c, err := protocol.VerifySupernodeCert(raw, trusted, id, time.Now(), nil)
		if err != nil || int(c.Capacity) != config.Default().Capacity {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("mega stays the default", func(t *testing.T) {
		raw := issue(t, "promote", "--key", key, "--peer", subject)
		c, err := protocol.VerifyMegaCert(raw, trusted, id, time.Now(), nil)
		if err != nil || c.Capacity != 5000 {
			t.Fatalf("%+v %v", c, err)
		}
	})
	t.Run("bad role", func(t *testing.T) {
		if _, stderr, code := runBin(t, nil, "operator", "promote", "--role", "king", "--key", key, "--peer", subject); code != 2 || !strings.Contains(stderr, "--role") {
			t.Fatalf("exit %d: %s", code, stderr)
		}
	})
	t.Run("run flags", func(t *testing.T) {
		certFile := filepath.Join(dir, "sn.cert")
		if err := os.WriteFile(certFile, []byte(protocol.EncodeBlob(issue(t, "cert", "--role", "supernode", "--key", key, "--peer", subject))), 0o600); err != nil {
			t.Fatal(err)
		}
		for _, tt := range []struct {
			name string
			args []string
			want string
		}{
			{"certified needs a key", []string{"--network-mode", "certified"}, "--network-mode"},
			{"unknown mode", []string{"--network-mode", "closed", "--operator-pubkey", pubOut}, "--network-mode"},
			{"supernode cert in an open network", []string{"--role", "supernode", "--network-mode", "open", "--operator-pubkey", strings.TrimSpace(pubOut), "--supernode-cert", certFile}, "--supernode-cert"},
			{"supernode cert on an ordinary node", []string{"--role", "ordinary", "--operator-pubkey", strings.TrimSpace(pubOut), "--supernode-cert", certFile}, "--supernode-cert"},
		} {
			t.Run(tt.name, func(t *testing.T) {
				args := append([]string{"run", "--data-dir", filepath.Join(t.TempDir(), "d"), "--api-listen", "off"}, tt.args...)
				if _, stderr, code := runBin(t, nil, args...); code != 2 || !strings.Contains(stderr, tt.want) {
					t.Fatalf("exit %d, want 2 naming %s: %s", code, tt.want, stderr)
				}
			})
		}
	})
}
