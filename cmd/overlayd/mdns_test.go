package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/version"
)

// TestMDNSFlag: mDNS is on by default; --mdns=false, OVERLAYD_MDNS=false
// and `mdns: false` in the config file turn it off, with the usual
// precedence.
func TestMDNSFlag(t *testing.T) {
	dir := t.TempDir()
	off := filepath.Join(dir, "off.yaml")
	on := filepath.Join(dir, "on.yaml")
	if err := os.WriteFile(off, []byte("mdns: false\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(on, []byte("mdns: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		env  string // OVERLAYD_MDNS, "" for unset
		args []string
		want bool
	}{
		{"default", "", nil, true},
		{"flag off", "", []string{"--mdns=false"}, false},
		{"flag on", "", []string{"--mdns"}, true},
		{"env off", "false", nil, false},
		{"file off", "", []string{"--config", off}, false},
		{"env over file", "false", []string{"--config", on}, false},
		{"flag over env", "false", []string{"--mdns=true"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv("OVERLAYD_MDNS", tt.env)
			} else {
				t.Setenv("OVERLAYD_MDNS", "")
				os.Unsetenv("OVERLAYD_MDNS")
			}
			var got *bool
			app := newApp(&bytes.Buffer{}, &bytes.Buffer{}, version.Read(nil))
			for _, c := range app.Commands {
				if c.Name == "run" {
					c.Action = func(ctx *cli.Context) error {
						cfg, err := configFrom(ctx)
						if err != nil {
							return err
						}
						got = &cfg.MDNS
						return nil
					}
				}
			}
			args := append([]string{"overlayd", "run", "--data-dir", t.TempDir()}, tt.args...)
			if err := app.Run(args); err != nil {
				t.Fatal(err)
			}
			if got == nil || *got != tt.want {
				t.Fatalf("mdns = %v, want %v", got != nil && *got, tt.want)
			}
		})
	}
}

// The LAN topology, in network namespaces named <prefix>-br, -s, -o:
//
//	s: eth 10.78.0.1/24 ─┐
//	                     br (a Linux bridge, multicast snooping off)
//	o: eth 10.78.0.2/24 ─┘
//
// The namespaces have no link to the host's network, so the multicast
// stays between the two daemons.
const lanNet = "10.78.0"

// lanNetns creates the namespaces, the bridge and the veth pairs, or skips
// the test naming what is missing. Everything is removed in t.Cleanup.
func lanNetns(t *testing.T) (s, o string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces and a bridge (ip netns add, ip link add type bridge)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skipf("needs ip (iproute2) on PATH: %v", err)
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	prefix := "ovm" + hex.EncodeToString(b[:])
	br, s, o := prefix+"-br", prefix+"-s", prefix+"-o"
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Probe: a container without CAP_SYS_ADMIN fails here.
	if out, err := exec.Command("ip", "netns", "add", br).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		for _, ns := range []string{br, s, o} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run("ip", "netns", "add", s)
	run("ip", "netns", "add", o)
	if out, err := exec.Command("ip", "-n", br, "link", "add", "br0", "type", "bridge").CombinedOutput(); err != nil {
		t.Skipf("cannot create a bridge: %v: %s", err, strings.TrimSpace(string(out)))
	}
	// Link-local multicast (224.0.0.251, mDNS) is flooded by a bridge
	// anyway; without snooping every multicast is.
	run("ip", "-n", br, "link", "set", "br0", "type", "bridge", "mcast_snooping", "0")
	run("ip", "link", "add", "m-s0", "netns", s, "type", "veth", "peer", "name", "m-bs", "netns", br)
	run("ip", "link", "add", "m-o0", "netns", o, "type", "veth", "peer", "name", "m-bo", "netns", br)
	for _, c := range [][]string{
		{br, "link", "set", "m-bs", "master", "br0"},
		{br, "link", "set", "m-bo", "master", "br0"},
		{br, "link", "set", "br0", "up"}, {br, "link", "set", "m-bs", "up"}, {br, "link", "set", "m-bo", "up"},
		{s, "addr", "add", lanNet + ".1/24", "dev", "m-s0"},
		{o, "addr", "add", lanNet + ".2/24", "dev", "m-o0"},
		{s, "link", "set", "lo", "up"}, {o, "link", "set", "lo", "up"},
		{s, "link", "set", "m-s0", "up", "multicast", "on"},
		{o, "link", "set", "m-o0", "up", "multicast", "on"},
	} {
		run(append([]string{"ip", "-n", c[0]}, c[1:]...)...)
	}
	return s, o
}

// TestMDNSLANDaemonsFindEachOther is issue 19's test: two real daemons on
// one LAN (a bridge between two network namespaces), started with no
// flags but their data dir (and the supernode's role), find each other by
// mDNS, and the ordinary node attaches to the supernode.
func TestMDNSLANDaemonsFindEachOther(t *testing.T) {
	s, o := lanNetns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	sDir, sLogs := daemon(t, ctx, s, "S", "--role", "supernode")
	sn := statusOf(t, sDir, "supernode up", 30*time.Second, func(st localapi.Status) bool { return st.PeerID != "" })
	t0 := time.Now()
	oDir, oLogs := daemon(t, ctx, o, "O")
	st := statusOf(t, oDir, "ordinary node attached to the supernode", 2*time.Minute, func(st localapi.Status) bool {
		return st.Attachment != nil && st.Attachment.Supernode == sn.PeerID
	})
	t.Logf("O (%s) attached to S (%s) %v after O started; O's directory holds %d, ring %s",
		st.PeerID, sn.PeerID, time.Since(t0).Round(time.Millisecond), st.DirectorySize, st.RingVersion)
	for name, logs := range map[string]*syncBuffer{"S": sLogs, "O": oLogs} {
		out := logs.String()
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, "mdns") || strings.Contains(l, "no peers") {
				t.Logf("%s: %s", name, l)
			}
		}
		if !strings.Contains(out, "mdns: looking for overlayd peers") {
			t.Errorf("%s did not start mDNS; logs:\n%s", name, tail(out, 40))
		}
		if strings.Contains(out, "no peers: this node is alone") && name == "O" {
			t.Errorf("O logged the join hint although it found S")
		}
	}
	if !strings.Contains(sLogs.String()+oLogs.String(), "mdns: connected") {
		t.Error("neither daemon logged an mDNS connection")
	}
}
