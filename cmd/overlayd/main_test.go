package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/version"
	"github.com/overlayd/overlayd/protocol"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// binary builds the real, static overlayd binary once per test run.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "overlayd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "overlayd")
		//lint:ignore SA1019 the toolchain running this test is the one to build with
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", binPath, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = errors.New(string(out))
		}
	})
	if buildErr != nil {
		t.Fatalf("build: %v", buildErr)
	}
	return binPath
}

func runBin(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	// Build first: the first call builds the binary, which on a loaded
	// machine can take longer than the run's own bound.
	bin := binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return o.String(), e.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return o.String(), e.String(), 0
}

// TestCorruptStoreExits: a supernode whose store.db is corrupt does not
// start: it exits non-zero with an error naming the file.
func TestCorruptStoreExits(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "store.db")
	if err := os.WriteFile(path, []byte(strings.Repeat("junk", 4096)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runBin(t, nil, "run", "--data-dir", dir, "--listen", "/ip4/127.0.0.1/tcp/0", "--role", "supernode", "--mdns=false")
	if code == 0 || !strings.Contains(stderr, path) || !strings.Contains(stderr, "corrupt") {
		t.Fatalf("exit %d, want non-zero with an error naming %s; stderr:\n%s", code, path, stderr)
	}
}

func TestBinaryRunStatusSigterm(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	cmd := exec.Command(binary(t), "run", "--data-dir", dir,
		"--listen", "/ip4/127.0.0.1/tcp/0", "--listen", "/ip4/127.0.0.1/udp/0/quic-v1",
		"--role", "supernode", "--announce-interval", "200ms")
	var logs syncBuffer
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	exitedC := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exitedC) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exitedC
	})

	// Wait for the API socket, then ask for the status the way a user does.
	var st localapi.Status
	deadline := time.Now().Add(15 * time.Second)
	for {
		out, _, code := runBin(t, nil, "status", "--json", "--data-dir", dir)
		if code == 0 {
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				t.Fatalf("status --json: %v\n%s", err, out)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon never answered; logs:\n%s", logs.String())
		}
		time.Sleep(50 * time.Millisecond) // polling an external process; no event to wait on
	}
	if !strings.HasPrefix(st.PeerID, "12D3KooW") || st.Role != "supernode" {
		t.Fatalf("status = %+v", st)
	}
	if o := st.OfflineStore; o == nil || o.MaxBytes != 1<<30 || o.Messages != 0 {
		t.Fatalf("status offline store = %+v, want an empty store bounded at 1 GiB", o)
	}
	if l := st.NoLoss; l == nil || l.ReplayGroups != 0 || l.ResumesDone != 0 {
		t.Fatalf("status no-loss figures = %+v, want a supernode's, all zero", l)
	}
	if out, _, code := runBin(t, nil, "status", "--data-dir", dir); code != 0 || !strings.Contains(out, "offline store") ||
		!strings.Contains(out, "group replay logs") || !strings.Contains(out, "offline messages") {
		t.Fatalf("status does not show the offline store and the no-loss figures (exit %d):\n%s", code, out)
	}
	key, err := os.ReadFile(filepath.Join(dir, "identity.key"))
	if err != nil || len(key) == 0 {
		t.Fatalf("identity key: %v", err)
	}

	// The supernode lists itself once its first announcement is in.
	deadline = time.Now().Add(5 * time.Second)
	for {
		out, _, _ := runBin(t, nil, "supernodes", "--data-dir", dir)
		if strings.Contains(out, st.PeerID+" (self)") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("supernodes never listed self:\n%s", out)
		}
		time.Sleep(50 * time.Millisecond)
	}

	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exitedC:
		if waitErr != nil {
			t.Fatalf("exit after SIGTERM: %v; logs:\n%s", waitErr, logs.String())
		}
		t.Logf("exited 0 %v after SIGTERM", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatalf("still running 5 s after SIGTERM; logs:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(dir, localapi.SocketFile)); err == nil {
		t.Error("API socket left behind")
	}
	_, stderr, code := runBin(t, nil, "status", "--data-dir", dir)
	if code == 0 || !strings.Contains(stderr, "no overlayd daemon is running") || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
		t.Fatalf("status without daemon: code %d, stderr %q", code, stderr)
	}
}

func TestBadInputExits2(t *testing.T) {
	cfgFile := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfgFile, []byte("capacity: 10\nbogus: 1\n"), 0o600)
	tests := []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"unknown role", nil, []string{"run", "--role", "banana"}, "--role"},
		{"bad multiaddr", nil, []string{"run", "--listen", "not-an-addr"}, "--listen"},
		{"bootstrap without peer id", nil, []string{"run", "--bootstrap", "/ip4/127.0.0.1/tcp/1"}, "--bootstrap"},
		{"negative capacity", nil, []string{"run", "--capacity", "-3"}, "--capacity"},
		{"capacity not a number", nil, []string{"run", "--capacity", "lots"}, "capacity"},
		{"unreadable config", nil, []string{"run", "--config", "/nonexistent/overlayd.yaml"}, "--config"},
		{"unknown config key", nil, []string{"run", "--config", cfgFile}, "bogus"},
		{"bad env value", []string{"OVERLAYD_ROLE=banana"}, []string{"run"}, "--role"},
		{"bad log level", nil, []string{"run", "--log-level", "loud"}, "--log-level"},
		{"store bound too small", nil, []string{"run", "--store-max-bytes", "1000"}, "--store-max-bytes"},
		{"zero offline ttl", nil, []string{"run", "--offline-ttl", "0s"}, "--offline-ttl"},
		{"public metrics without opt-in", nil, []string{"run", "--metrics-listen", "0.0.0.0:9100"}, "--metrics-listen"},
		{"unknown flag", nil, []string{"run", "--frobnicate"}, "frobnicate"},
		{"unknown command", nil, []string{"frobnicate"}, "frobnicate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(tt.args, "--data-dir", filepath.Join(t.TempDir(), "d"))
			if tt.name == "unknown command" {
				args = tt.args
			}
			_, stderr, code := runBin(t, tt.env, args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, tt.want) {
				t.Fatalf("stderr %q does not name %q", stderr, tt.want)
			}
			if strings.Contains(stderr, "panic") || strings.Contains(stderr, "goroutine ") {
				t.Fatalf("panicked: %s", stderr)
			}
		})
	}
}

func TestConfigPrecedence(t *testing.T) {
	// flag > env > file > default, checked through the same code path run uses.
	file := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(file, []byte("capacity: 11\nrole: supernode\nlog-level: warn\nannounce-interval: 3s\n"), 0o600)
	t.Setenv("OVERLAYD_CAPACITY", "22")
	t.Setenv("OVERLAYD_LOG_LEVEL", "error")
	var got struct {
		capacity    int
		role, level string
		interval    time.Duration
	}
	app := newApp(&bytes.Buffer{}, &bytes.Buffer{}, version.Read(nil))
	for _, c := range app.Commands {
		if c.Name == "run" {
			c.Action = func(ctx *cli.Context) error {
				cfg, err := configFrom(ctx)
				if err != nil {
					return err
				}
				got.capacity, got.role, got.level, got.interval = cfg.Capacity, string(cfg.Role), cfg.LogLevel, cfg.AnnounceInterval
				return nil
			}
		}
	}
	if err := app.Run([]string{"overlayd", "run", "--config", file, "--capacity", "33"}); err != nil {
		t.Fatal(err)
	}
	if got.capacity != 33 || got.level != "error" || got.role != "supernode" || got.interval != 3*time.Second {
		t.Fatalf("got %+v; want capacity 33 (flag), level error (env), role supernode and interval 3s (file)", got)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestOperatorCommands(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "op.key")
	pub, stderr, code := runBin(t, nil, "operator", "keygen", "--out", key)
	if code != 0 || !strings.HasPrefix(strings.TrimSpace(pub), "ed25519:") {
		t.Fatalf("keygen: code %d, out %q, err %q", code, pub, stderr)
	}
	if st, err := os.Stat(key); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", st, err)
	}
	if _, stderr, code := runBin(t, nil, "operator", "keygen", "--out", key); code == 0 || !strings.Contains(stderr, "refusing to overwrite") {
		t.Fatalf("second keygen: code %d, %q", code, stderr)
	}
	const subject = "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"
	cert, stderr, code := runBin(t, nil, "operator", "promote", "--key", key, "--peer", subject, "--ttl", "1h", "--capacity", "900")
	if code != 0 {
		t.Fatalf("promote: %d %s", code, stderr)
	}
	raw, err := protocol.DecodeBlob(cert)
	if err != nil {
		t.Fatal(err)
	}
	k, err := protocol.DecodeKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.Decode(subject)
	c, err := protocol.VerifyMegaCert(raw, []crypto.PubKey{k}, id, time.Now(), nil)
	if err != nil || c.Capacity != 900 {
		t.Fatalf("printed certificate: %+v %v", c, err)
	}
	if _, stderr, code := runBin(t, nil, "operator", "promote", "--key", key, "--peer", "nobody"); code != 2 || !strings.Contains(stderr, "--peer") {
		t.Fatalf("bad --peer: %d %s", code, stderr)
	}
	if _, _, code := runBin(t, nil, "operator", "revoke", "--key", key, "--serial", "5"); code != 0 {
		t.Fatalf("revoke: %d", code)
	}
}

// TestTestnetTour runs the README's main command and checks it shows the
// whole system working and writes a report.
func TestTestnetTour(t *testing.T) {
	dir := t.TempDir()
	out, stderr, code := runBin(t, nil, "testnet", "run", "--report", dir)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	for _, want := range []string{`scenario tour, seed 1`, `PASS +network formed`, `PASS +messages delivered after the hand-back`,
		`kill sn`, `promote mega0`, `restart sn`, `hand-back mega0`, `scenario tour PASSED`, `report\.json`} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"report.json", "report.md", "attached.png"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("report file %s: %v", f, err)
		}
	}
}

// TestTestnetFailsItsCriteria: a scenario whose criterion fails exits 1 and
// says which; a bad scenario name is a usage error.
func TestTestnetFailsItsCriteria(t *testing.T) {
	out, stderr, code := runBin(t, nil, "testnet", "run", "--scenario", "storm", "--no-jitter", "--supernodes", "4", "--clients", "16", "--capacity", "6")
	if code != 1 || !regexp.MustCompile(`FAIL +reconnect wave spread`).MatchString(out) || !strings.Contains(stderr, "pass criterion failed") {
		t.Fatalf("storm without jitter: exit %d\n%s\n%s", code, out, stderr)
	}
	if _, stderr, code := runBin(t, nil, "testnet", "run", "--scenario", "banana"); code != 2 || !strings.Contains(stderr, "--scenario") {
		t.Fatalf("bad scenario: exit %d %s", code, stderr)
	}
}
