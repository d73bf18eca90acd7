package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/localapi"
)

// The NAT topology, in network namespaces named <prefix>-pub, -rt, -a:
//
//	pub: supernode S (11.0.0.1:4101) and peer B (11.0.0.1:4102)
//	      | p0 11.0.0.1/24, route to 10.77.0.0/24 via the router
//	      |
//	rt:   r0 11.0.0.254/24 ── NAT (MASQUERADE out of r0; new connections
//	      r1 10.77.0.1/24      from r0 to r1 dropped) ── forwarding on
//	      |
//	a:    a0 10.77.0.2/24, default route via 10.77.0.1: peer A (10.77.0.2:4101)
//
// The "public" side uses 11.0.0.0/24, which go-multiaddr counts as public,
// so AutoNAT and hole punching treat it as the internet would; the
// namespaces have no link to the host's network, so nothing leaves them.
const (
	natPubNet  = "11.0.0"
	natPrivNet = "10.77.0"
)

// netns creates the namespaces and links, or skips the test naming what
// is missing. Everything is removed in t.Cleanup, even on failure.
func netns(t *testing.T) (pub, rt, a string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces (ip netns add)")
	}
	for _, tool := range []string{"ip", "iptables", "bash"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH: %v", tool, err)
		}
	}
	var b [3]byte
	_, _ = rand.Read(b[:])
	prefix := "ovl" + hex.EncodeToString(b[:])
	pub, rt, a = prefix+"-pub", prefix+"-rt", prefix+"-a"
	run := func(args ...string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	// Probe: a container without CAP_SYS_ADMIN fails here.
	if out, err := exec.Command("ip", "netns", "add", pub).CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace: %v: %s", err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		for _, ns := range []string{pub, rt, a} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	run("ip", "netns", "add", rt)
	run("ip", "netns", "add", a)
	run("ip", "link", "add", "p0", "netns", pub, "type", "veth", "peer", "name", "r0", "netns", rt)
	run("ip", "link", "add", "r1", "netns", rt, "type", "veth", "peer", "name", "a0", "netns", a)
	for _, c := range [][]string{
		{pub, "addr", "add", natPubNet + ".1/24", "dev", "p0"},
		{rt, "addr", "add", natPubNet + ".254/24", "dev", "r0"},
		{rt, "addr", "add", natPrivNet + ".1/24", "dev", "r1"},
		{a, "addr", "add", natPrivNet + ".2/24", "dev", "a0"},
		{pub, "link", "set", "lo", "up"}, {rt, "link", "set", "lo", "up"}, {a, "link", "set", "lo", "up"},
		{pub, "link", "set", "p0", "up"}, {rt, "link", "set", "r0", "up"}, {rt, "link", "set", "r1", "up"}, {a, "link", "set", "a0", "up"},
		{a, "route", "add", "default", "via", natPrivNet + ".1"},
		// The public side knows the way to the private net, so a failed
		// direct dial is the NAT's doing, not a missing route.
		{pub, "route", "add", natPrivNet + ".0/24", "via", natPubNet + ".254"},
	} {
		run(append([]string{"ip", "-n", c[0]}, c[1:]...)...)
	}
	ipt := func(args ...string) { run(append([]string{"ip", "netns", "exec", rt, "iptables"}, args...)...) }
	run("ip", "netns", "exec", rt, "sysctl", "-qw", "net.ipv4.ip_forward=1")
	ipt("-t", "nat", "-A", "POSTROUTING", "-o", "r0", "-j", "MASQUERADE")
	ipt("-A", "FORWARD", "-i", "r0", "-o", "r1", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT")
	ipt("-A", "FORWARD", "-i", "r0", "-o", "r1", "-j", "DROP")
	return pub, rt, a
}

// daemon runs `overlayd run` in namespace ns until the test ends.
func daemon(t *testing.T, ctx context.Context, ns, name string, args ...string) (dataDir string, logs *syncBuffer) {
	t.Helper()
	dataDir = filepath.Join(t.TempDir(), name)
	full := append([]string{"netns", "exec", ns, binary(t), "run", "--data-dir", dataDir, "--log-level", "debug"}, args...)
	cmd := exec.CommandContext(ctx, "ip", full...)
	logs = &syncBuffer{}
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("%s logs:\n%s", name, tail(logs.String(), 60))
		}
	})
	return dataDir, logs
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// statusOf polls the daemon of dataDir until cond holds on its status.
func statusOf(t *testing.T, dataDir, what string, within time.Duration, cond func(localapi.Status) bool) localapi.Status {
	t.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		out, errOut, code := runBin(t, nil, "status", "--json", "--data-dir", dataDir)
		if code == 0 {
			var st localapi.Status
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
			if cond(st) {
				return st
			}
			last = out
		} else {
			last = errOut
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v; last status:\n%s", what, within, last)
		}
		time.Sleep(100 * time.Millisecond) // polling an external process; no event to wait on
	}
}

// TestNATPeerReachableThroughRelay: peer A behind a NAT router cannot be
// dialled directly, but peer B on the public side reaches it through the
// relay of A's supernode.
func TestNATPeerReachableThroughRelay(t *testing.T) {
	pub, _, a := netns(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	common := []string{"--announce-interval", "500ms", "--keepalive", "500ms", "--retry-base", "100ms", "--api-listen", ""}

	sDir, _ := daemon(t, ctx, pub, "S", append([]string{"--role", "supernode", "--capacity", "10",
		"--listen", "/ip4/" + natPubNet + ".1/tcp/4101"}, common...)...)
	s := statusOf(t, sDir, "supernode up", 20*time.Second, func(st localapi.Status) bool { return st.PeerID != "" })
	if s.Relay == nil || s.Relay.Service == nil {
		t.Fatalf("supernode runs no relay service: %+v", s.Relay)
	}
	boot := fmt.Sprintf("/ip4/%s.1/tcp/4101/p2p/%s", natPubNet, s.PeerID)

	t0 := time.Now()
	aDir, _ := daemon(t, ctx, a, "A", append([]string{"--role", "ordinary", "--bootstrap", boot,
		"--listen", "/ip4/" + natPrivNet + ".2/tcp/4101"}, common...)...)
	bDir, _ := daemon(t, ctx, pub, "B", append([]string{"--role", "ordinary", "--bootstrap", boot,
		"--listen", "/ip4/" + natPubNet + ".1/tcp/4102"}, common...)...)

	as := statusOf(t, aDir, "A reserved a relay slot on S", 30*time.Second, func(st localapi.Status) bool {
		return st.Relay != nil && st.Relay.Reservation != nil && st.Relay.Reservation.Relay == s.PeerID
	})
	t.Logf("A (%s) reachability %s, reserved on S %v after start; relayed addrs %v",
		as.PeerID, as.Relay.Reachability, time.Since(t0).Round(time.Millisecond), as.Relay.Reservation.Addrs)
	statusOf(t, bDir, "B attached", 30*time.Second, func(st localapi.Status) bool { return st.Attachment != nil })

	// S sees A's connection from the router's public address: the NAT works.
	out, _, code := runBin(t, nil, "peers", "--json", "--data-dir", sDir)
	if code != 0 || !strings.Contains(out, "/ip4/"+natPubNet+".254/") || strings.Contains(out, natPrivNet+".2") {
		t.Fatalf("S's peers do not show A behind the router's address %s.254:\n%s", natPubNet, out)
	}

	// A direct dial to A's private address fails from the public side,
	// while A does listen there (checked from inside A's namespace).
	dial := func(ns string) error {
		c, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return exec.CommandContext(c, "ip", "netns", "exec", ns, "bash", "-c",
			"timeout 3 bash -c 'echo > /dev/tcp/"+natPrivNet+".2/4101'").Run()
	}
	if err := dial(a); err != nil {
		t.Fatalf("A does not listen on its private address: %v", err)
	}
	if err := dial(pub); err == nil {
		t.Fatal("a direct dial from the public side reached A behind the NAT")
	}

	// B reaches A through S's relay. A's presence reaches S at once (S is
	// A's supernode and, alone, its home cluster); retry briefly anyway.
	var resp localapi.PingResponse
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, errOut, code := runBin(t, nil, "ping", "--json", "--count", "5", "--wait", "3s", "--data-dir", bDir, as.PeerID)
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &resp); err != nil {
				t.Fatalf("ping --json: %v\n%s", err, out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("ping A from B: exit %d: %s", code, errOut)
		}
		time.Sleep(200 * time.Millisecond) // polling an external process
	}
	if resp.Path != "relayed" || resp.Relay != s.PeerID || !strings.Contains(resp.Addr, "/p2p-circuit") {
		t.Fatalf("ping went %s via %s (%s), want relayed through S", resp.Path, resp.Relay, resp.Addr)
	}
	t.Logf("B→A relayed through S: connect %.1f ms, rtt %v ms; became direct: %v (rtt %v ms via %s)",
		resp.ConnectMs, resp.RTTMs, resp.BecameDirect, resp.DirectRTTMs, resp.DirectAddr)
	// For comparison, B→S direct in the same run.
	out, _, code = runBin(t, nil, "ping", "--json", "--count", "5", "--wait", "0s", "--data-dir", bDir, s.PeerID)
	var direct localapi.PingResponse
	if code == 0 && json.Unmarshal([]byte(out), &direct) == nil {
		t.Logf("B→S %s: rtt %v ms", direct.Path, direct.RTTMs)
	}
	st := statusOf(t, sDir, "S counts the circuit", 5*time.Second, func(st localapi.Status) bool {
		return st.Relay != nil && st.Relay.Service != nil && st.Relay.Service.Reservations >= 1
	})
	t.Logf("S relay: %+v, refused %v", *st.Relay.Service, st.Relay.Refused)
	out, _, _ = runBin(t, nil, "status", "--data-dir", sDir)
	if !strings.Contains(out, "relay service") {
		t.Fatalf("S's status shows no relay service:\n%s", out)
	}
	out2, _, _ := runBin(t, nil, "status", "--data-dir", aDir)
	if !strings.Contains(out2, "relayed address") {
		t.Fatalf("A's status shows no relayed address:\n%s", out2)
	}
	t.Logf("S status:\n%s\nA status:\n%s", out, out2)
}
