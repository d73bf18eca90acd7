package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/localapi"
)

// Environment of the file-server helper process (TestTunnelFileServerHelper).
const (
	fileServerEnv = "OVERLAYD_TEST_FILE_SERVER" // listen address
	fileSizeEnv   = "OVERLAYD_TEST_FILE_SIZE"
)

// fileSeed seeds the served file's bytes: the test computes the same
// digest without storing the file.
const fileSeed = 20

func fileStream(size int64) io.Reader {
	return io.LimitReader(rand.NewChaCha8([32]byte{fileSeed}), size)
}

// TestTunnelFileServerHelper is not a test: run in a namespace by
// TestTunnelNATRelayedThenDirect (with fileServerEnv set), it serves
// /file, fileSizeEnv pseudo-random bytes, until killed.
func TestTunnelFileServerHelper(t *testing.T) {
	addr := os.Getenv(fileServerEnv)
	if addr == "" {
		t.Skip("helper process of TestTunnelNATRelayedThenDirect")
	}
	size, _ := strconv.ParseInt(os.Getenv(fileSizeEnv), 10, 64)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("serving") // the parent waits for this line
	_ = http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		_, _ = io.Copy(w, fileStream(size))
	}))
}

// TestTunnelNATRelayedThenDirect: peer A behind the NAT exposes an HTTP
// server; peer B on the public side connects to it by peer ID and fetches
// 100 MiB through the tunnel. The connection starts on the relayed circuit
// through A's supernode and moves to the direct connection hole punching
// makes, without the HTTP transfer noticing: the file arrives
// byte-identical.
func TestTunnelNATRelayedThenDirect(t *testing.T) {
	const size = 100 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	nt := tunnelNAT(t, ctx, size, nil)
	pub, aDir, bDir, bLogs, listen := nt.pub, nt.aDir, nt.bDir, nt.bLogs, nt.listen

	// Fetch the file from B's namespace, through the tunnel.
	t0 := time.Now()
	curl := exec.CommandContext(ctx, "ip", "netns", "exec", pub, "curl", "-sS", "--max-time", "75", "http://"+listen+"/file")
	body, err := curl.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var curlErr strings.Builder
	curl.Stderr = &curlErr
	if err := curl.Start(); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, _ := io.Copy(h, body)
	if err := curl.Wait(); err != nil {
		t.Fatalf("curl after %d bytes: %v: %s", n, err, curlErr.String())
	}
	took := time.Since(t0)
	want := sha256.New()
	_, _ = io.Copy(want, fileStream(size))
	if n != size || hex.EncodeToString(h.Sum(nil)) != hex.EncodeToString(want.Sum(nil)) {
		t.Fatalf("fetched %d bytes, sha256 %x; want %d bytes, %x", n, h.Sum(nil), size, want.Sum(nil))
	}
	t.Logf("fetched %d MiB through the tunnel in %v (%.0f MiB/s), sha256 identical", size>>20, took.Round(time.Millisecond), float64(size>>20)/took.Seconds())

	var tl localapi.Tunnels
	o, _, _ := runBin(t, nil, "tunnels", "--json", "--data-dir", bDir)
	if err := json.Unmarshal([]byte(o), &tl); err != nil || len(tl.Connects) != 1 {
		t.Fatalf("tunnels --json: %v\n%s", err, o)
	}
	c := tl.Connects[0]
	if c.Total != 1 || c.BytesIn < size || c.RelayCuts != 0 || c.Failed != 0 {
		t.Fatalf("B's connect: %+v", c)
	}
	// It started on the relayed circuit and moved to a direct connection.
	// Hole punching starts when B's relayed connection to A opens and
	// takes a round trip or two here; B's first stream opens a round trip
	// or two later too. When hole punching wins (seen once in CI under
	// -race, 0 of 10 runs alone), the stream opens on the direct
	// connection and there is no move to check: the transfer above passed,
	// the move is not exercised, and the test says so instead of passing.
	logs := bLogs.String()
	first := ""
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "tunnel stream") {
			first = l
			break
		}
	}
	if strings.Contains(first, "limited=false") {
		t.Skipf("hole punching made the direct connection before B's first tunnel stream, so the move from the relay could not be exercised (the 100 MiB transfer passed): %s", first)
	}
	if first == "" || !strings.Contains(first, "limited=true") {
		t.Fatalf("B's tunnel did not start relayed:\n%s", tail(logs, 40))
	}
	if c.Migrations < 1 || !strings.Contains(logs, "tunnel connection moved") || !strings.Contains(logs, "path=direct") {
		t.Fatalf("the connection did not move to a direct connection (migrations %d):\n%s", c.Migrations, tail(logs, 40))
	}
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "tunnel connection moved") {
			t.Logf("B: %s", l)
		}
	}
	o, _, _ = runBin(t, nil, "tunnels", "--data-dir", aDir)
	t.Logf("A's tunnels:\n%s", o)
	if !strings.Contains(o, "expose web -> 127.0.0.1:8080") || !strings.Contains(o, "1 total") {
		t.Fatalf("A's tunnels listing:\n%s", o)
	}
	if _, e, code := runBin(t, nil, "disconnect", listen, "--data-dir", bDir); code != 0 {
		t.Fatalf("disconnect: %s", e)
	}
	if _, e, code := runBin(t, nil, "unexpose", "web", "--data-dir", aDir); code != 0 {
		t.Fatalf("unexpose: %s", e)
	}
}

// natTunnel is the setup of the tunnel NAT tests: S and B public, A behind
// the NAT serving a file on its loopback, exposed to B, and B's connect
// listener on listen (in pub's namespace).
type natTunnel struct {
	pub, rt, aDir, bDir, listen string
	bLogs                       *syncBuffer
}

// tunnelNAT sets up the tunnel NAT tests; before, when not nil, runs once
// the namespaces exist (to add firewall rules in rt).
func tunnelNAT(t *testing.T, ctx context.Context, size int, before func(rt string)) natTunnel {
	t.Helper()
	pub, rt, a := netns(t)
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skipf("needs curl: %v", err)
	}
	if before != nil {
		before(rt)
	}
	common := []string{"--announce-interval", "500ms", "--keepalive", "500ms", "--retry-base", "100ms", "--api-listen", ""}

	// The HTTP server, in A's namespace on its loopback.
	srv := exec.CommandContext(ctx, "ip", "netns", "exec", a, os.Args[0], "-test.run=^TestTunnelFileServerHelper$")
	srv.Env = append(os.Environ(), fileServerEnv+"=127.0.0.1:8080", fileSizeEnv+"="+strconv.Itoa(size))
	out, err := srv.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	line := make([]byte, 8)
	if _, err := io.ReadFull(out, line); err != nil || string(line) != "serving\n" {
		t.Fatalf("file server did not start: %q %v", line, err)
	}

	sDir, _ := daemon(t, ctx, pub, "S", append([]string{"--role", "supernode", "--capacity", "10",
		"--listen", "/ip4/" + natPubNet + ".1/tcp/4101"}, common...)...)
	s := statusOf(t, sDir, "supernode up", 20*time.Second, func(st localapi.Status) bool { return st.PeerID != "" })
	boot := fmt.Sprintf("/ip4/%s.1/tcp/4101/p2p/%s", natPubNet, s.PeerID)
	aDir, _ := daemon(t, ctx, a, "A", append([]string{"--role", "ordinary", "--bootstrap", boot,
		"--listen", "/ip4/" + natPrivNet + ".2/tcp/4101"}, common...)...)
	bDir, bLogs := daemon(t, ctx, pub, "B", append([]string{"--role", "ordinary", "--bootstrap", boot,
		"--listen", "/ip4/" + natPubNet + ".1/tcp/4102"}, common...)...)
	as := statusOf(t, aDir, "A reserved a relay slot on S", 30*time.Second, func(st localapi.Status) bool {
		return st.Relay != nil && st.Relay.Reservation != nil && st.Relay.Reservation.Relay == s.PeerID
	})
	statusOf(t, bDir, "B attached", 30*time.Second, func(st localapi.Status) bool { return st.Attachment != nil })

	if o, e, code := runBin(t, nil, "expose", "web", "127.0.0.1:8080", "--allow", "12D3KooWBadPeerIDxx", "--data-dir", aDir); code == 0 {
		t.Fatalf("expose with a bad --allow succeeded: %s", o)
	} else if !strings.Contains(e, "not a peer ID") {
		t.Fatalf("expose with a bad --allow: %s", e)
	}
	bs := statusOf(t, bDir, "B's peer ID", 5*time.Second, func(st localapi.Status) bool { return st.PeerID != "" })
	o, e, code := runBin(t, nil, "expose", "web", "127.0.0.1:8080", "--allow", bs.PeerID, "--data-dir", aDir)
	if code != 0 || !strings.Contains(o, "exposed web (127.0.0.1:8080) to "+bs.PeerID) {
		t.Fatalf("expose: exit %d: %s%s", code, o, e)
	}
	o, e, code = runBin(t, nil, "connect", as.PeerID+"/web", "--data-dir", bDir)
	prefix := "listening on "
	if code != 0 || !strings.HasPrefix(o, prefix) || !strings.Contains(o, " -> "+as.PeerID+"/web") {
		t.Fatalf("connect: exit %d: %s%s", code, o, e)
	}
	return natTunnel{pub: pub, rt: rt, aDir: aDir, bDir: bDir, bLogs: bLogs, listen: strings.Fields(strings.TrimPrefix(o, prefix))[0]}
}

// TestTunnelNATRelayCut: as TestTunnelNATRelayedThenDirect, but the router
// drops A's packets to B's address, so hole punching cannot make a direct
// connection: the relay's circuit limit (128 KiB per direction) cuts the
// transfer, and B says so.
func TestTunnelNATRelayCut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	n := tunnelNAT(t, ctx, 4<<20, func(rt string) {
		c := exec.Command("ip", "netns", "exec", rt, "iptables", "-I", "FORWARD", "-i", "r1", "-o", "r0",
			"-p", "tcp", "-d", natPubNet+".1", "--dport", "4102", "-j", "DROP")
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("iptables: %v: %s", err, out)
		}
	})
	curl := exec.CommandContext(ctx, "ip", "netns", "exec", n.pub, "curl", "-sS", "--max-time", "60", "-o", "/dev/null",
		"-w", "%{size_download}", "http://"+n.listen+"/file")
	out, err := curl.Output()
	if err == nil {
		t.Fatalf("the whole file came through a relay limited to 128 KiB: %s bytes", out)
	}
	got, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	if got > 1<<20 {
		t.Fatalf("curl got %d bytes through the relay", got)
	}
	var tl localapi.Tunnels
	o, _, _ := runBin(t, nil, "tunnels", "--json", "--data-dir", n.bDir)
	if err := json.Unmarshal([]byte(o), &tl); err != nil || len(tl.Connects) != 1 {
		t.Fatalf("tunnels --json: %v\n%s", err, o)
	}
	c := tl.Connects[0]
	if c.RelayCuts != 1 || !strings.Contains(c.LastError, "the relay cut the tunnel") || !strings.Contains(c.LastError, "128 KiB per direction") {
		t.Fatalf("B does not report the relay cut: %+v", c)
	}
	t.Logf("curl got %d bytes (%v); B reports: %s", got, err, c.LastError)
}

// TestTunnelCLIArguments: expose and connect refuse bad arguments with a
// clear message and exit 2, before asking any daemon.
func TestTunnelCLIArguments(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"expose without allow-list", []string{"expose", "web", "127.0.0.1:8080"}, "needs --allow <peer-id> (repeatable) or --allow-any"},
		{"expose with both", []string{"expose", "web", "127.0.0.1:8080", "--allow", "p", "--allow-any"}, "not both"},
		{"expose without target", []string{"expose", "web", "--allow-any"}, "needs 2 arguments"},
		{"connect without name", []string{"connect", "12D3KooWpeer"}, "want <peer-id>/<name>"},
		{"connect without peer", []string{"connect", "/web"}, "want <peer-id>/<name>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, e, code := runBin(t, nil, append(tc.args, "--data-dir", dir)...)
			if code != 2 || !strings.Contains(e, tc.want) {
				t.Fatalf("exit %d, stderr %q; want 2 and %q", code, e, tc.want)
			}
		})
	}
	// Without a daemon: one line saying so.
	_, e, code := runBin(t, nil, "tunnels", "--data-dir", dir)
	if code != 1 || !strings.Contains(e, "daemon") {
		t.Fatalf("tunnels without a daemon: exit %d, %q", code, e)
	}
}
