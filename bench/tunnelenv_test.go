//go:build linux

package bench

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The processes the tunnel benchmarks drive: overlayd daemons (the binary
// built from the parent module, or $OVERLAYD_BIN), Kubo daemons
// ($OVERLAYD_KUBO, or what kubo/build.sh left in its cache), and network
// namespaces for the relayed path. Linux only: CPU is read from /proc and
// the relayed path needs network namespaces.

// benchEnv holds what the package's benchmarks share within one process:
// the overlayd binary, built at most once. TestMain creates and removes it.
type benchEnv struct {
	dir  string
	once sync.Once
	bin  string
	err  error
}

// env is set by TestMain for the whole run of the test binary.
var env *benchEnv

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "overlayd-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	env = &benchEnv{dir: dir}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// overlaydBinary returns $OVERLAYD_BIN or the overlayd binary built from
// ../cmd/overlayd (static, once per process).
func overlaydBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("OVERLAYD_BIN"); p != "" {
		return p
	}
	env.once.Do(func() {
		bin := filepath.Join(env.dir, "overlayd")
		// Built in the parent module (its go.mod and go.sum), not this
		// one's.
		cmd := exec.Command("go", "build", "-o", bin, "./cmd/overlayd")
		cmd.Dir = ".."
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			env.err = fmt.Errorf("build overlayd: %v\n%s", err, out)
			return
		}
		env.bin = bin
	})
	if env.err != nil {
		b.Fatal(env.err)
	}
	return env.bin
}

// requireTunnels skips b unless bin has the tunnel commands (they arrive
// with the tunnel feature; until then only path=tcp and path=kubo run).
func requireTunnels(b *testing.B, bin string) {
	b.Helper()
	out, err := exec.Command(bin, "expose", "--help").CombinedOutput()
	if err != nil {
		b.Skipf("%s has no tunnel commands (`overlayd expose --help`: %v: %s); build from a tree with the tunnel feature or set OVERLAYD_BIN",
			bin, err, strings.TrimSpace(string(out)))
	}
}

// kuboBinary returns $OVERLAYD_KUBO, else the binary kubo/build.sh leaves
// in its default cache, or skips b naming the script.
func kuboBinary(b *testing.B) string {
	b.Helper()
	if p := os.Getenv("OVERLAYD_KUBO"); p != "" {
		if _, err := os.Stat(p); err != nil {
			b.Fatalf("OVERLAYD_KUBO: %v", err)
		}
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			b.Skipf("no Kubo binary: set OVERLAYD_KUBO, or run bench/kubo/build.sh (no home directory for its cache: %v)", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "overlayd-bench", "kubo", "ipfs-"+kuboVersion)
	if _, err := os.Stat(p); err != nil {
		b.Skipf("no Kubo binary at %s: run bench/kubo/build.sh (about 10 minutes on 2 cores) or set OVERLAYD_KUBO to an ipfs %s binary", p, kuboVersion)
	}
	return p
}

// cleanups runs functions in reverse order of adding; the benchmarks
// keep one per path so that a path's processes outlive the repeated calls
// of its sub-benchmarks and stop when the path is done.
type cleanups []func()

func (c *cleanups) add(f func()) { *c = append(*c, f) }

func (c *cleanups) run() {
	for i := len(*c) - 1; i >= 0; i-- {
		(*c)[i]()
	}
	*c = nil
}

// proc is a started daemon process. Its log goes to a file.
type proc struct {
	name    string
	cmd     *exec.Cmd
	logPath string
	exited  chan struct{}
	waitErr error
}

// startProc starts bin args... (inside network namespace ns unless it is
// empty: `ip netns exec` execs the binary, so the PID is the daemon's),
// with extra environment, logging to dir/name.log. stdout, if not nil,
// also receives the process's standard output.
func startProc(b *testing.B, cl *cleanups, dir, ns, name string, extraEnv []string, stdout io.Writer, bin string, args ...string) *proc {
	b.Helper()
	p := &proc{name: name, logPath: filepath.Join(dir, name+".log"), exited: make(chan struct{})}
	logf, err := os.Create(p.logPath)
	if err != nil {
		b.Fatal(err)
	}
	if ns != "" {
		p.cmd = exec.Command("ip", append([]string{"netns", "exec", ns, bin}, args...)...)
	} else {
		p.cmd = exec.Command(bin, args...)
	}
	p.cmd.Env = append(os.Environ(), extraEnv...)
	p.cmd.Stderr = logf
	p.cmd.Stdout = logf
	if stdout != nil {
		p.cmd.Stdout = io.MultiWriter(logf, stdout)
	}
	if err := p.cmd.Start(); err != nil {
		logf.Close()
		b.Fatalf("start %s: %v", name, err)
	}
	go func() { p.waitErr = p.cmd.Wait(); logf.Close(); close(p.exited) }()
	cl.add(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// logTail is the end of the process's log, for failure messages.
func (p *proc) logTail() string {
	data, _ := os.ReadFile(p.logPath)
	if len(data) > 3000 {
		data = data[len(data)-3000:]
	}
	return string(data)
}

// cpuTicks is utime+stime of the processes, in clock ticks (USER_HZ, 100
// on Linux), from /proc/<pid>/stat.
func cpuTicks(pids []int) (int64, error) {
	var sum int64
	for _, pid := range pids {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return 0, err
		}
		// The command name (field 2) may hold spaces; fields after its
		// closing parenthesis start with the state (field 3). utime and
		// stime are fields 14 and 15.
		i := strings.LastIndexByte(string(data), ')')
		if i < 0 {
			return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
		}
		f := strings.Fields(string(data[i+1:]))
		if len(f) < 13 {
			return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
		}
		for _, s := range f[11:13] {
			v, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/%d/stat: %v", pid, err)
			}
			sum += v
		}
	}
	return sum, nil
}

// userHZ is the unit of /proc/<pid>/stat's times: sysconf(_SC_CLK_TCK),
// 100 on every Linux architecture Go supports.
const userHZ = 100

// shortDir makes a temporary directory with a short path: a data dir
// holds the local API's unix socket, whose path must stay under 108 bytes.
func shortDir(b *testing.B, cl *cleanups, prefix string) string {
	b.Helper()
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		b.Fatal(err)
	}
	cl.add(func() { _ = os.RemoveAll(d) })
	return d
}

// runCmd runs bin args... (a CLI call, not a daemon) with a bound and
// returns its standard output.
func runCmd(ctx context.Context, extraEnv []string, bin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), extraEnv...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", filepath.Base(bin), strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), nil
}

// poll calls f until it returns true or an error, every interval, for at
// most within. Polling external processes: there is no event to wait on.
func poll(ctx context.Context, within, interval time.Duration, what string, f func() (bool, error)) error {
	deadline := time.Now().Add(within)
	var last error
	for {
		ok, err := f()
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %v (last error: %v)", what, within, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

// --- network namespaces ---

// netnsDo runs f on an OS thread moved into network namespace ns (the
// calling thread's namespace when ns is empty): sockets f creates belong to
// ns and keep working from any thread afterwards. If the thread cannot be
// moved back it is discarded (its goroutine exits locked).
func netnsDo(ns string, f func() error) error {
	if ns == "" {
		return f()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		target, err := os.Open(filepath.Join("/var/run/netns", ns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("setns %s: %w", ns, err)
			return
		}
		ferr := f()
		if err := setns(orig); err != nil {
			// Stay locked: the thread ends with this goroutine.
			errc <- fmt.Errorf("setns back from %s: %w", ns, err)
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(f *os.File) error {
	// The syscall package (frozen) has no SYS_SETNS for every
	// architecture; these are the kernel's numbers.
	nr := map[string]uintptr{"amd64": 308, "arm64": 268, "riscv64": 268, "loong64": 268, "386": 346, "arm": 375,
		"ppc64": 350, "ppc64le": 350, "s390x": 339}[runtime.GOARCH]
	if nr == 0 {
		return fmt.Errorf("setns: syscall number unknown on %s", runtime.GOARCH)
	}
	if _, _, e := syscall.Syscall(nr, f.Fd(), syscall.CLONE_NEWNET, 0); e != 0 {
		return e
	}
	return nil
}

// dialIn dials a TCP address from network namespace ns.
func dialIn(ctx context.Context, ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := netnsDo(ns, func() error {
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// listenIn listens on a TCP address in network namespace ns.
func listenIn(ns, addr string) (net.Listener, error) {
	var ln net.Listener
	err := netnsDo(ns, func() error {
		var err error
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// freePort returns a TCP port free on 127.0.0.1 in ns now.
func freePort(b *testing.B, ns string) int {
	b.Helper()
	ln, err := listenIn(ns, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// The relayed topology, in namespaces <prefix>-s, -a, -b:
//
//	a (10.201.1.2) ── veth ── s (10.201.1.1, 10.201.2.1) ── veth ── b (10.201.2.2)
//
// The supernode runs in s, the exposing peer in a, the connecting peer in
// b. s does not forward (ip_forward 0) and a and b
// have routes to their own link only, so a and b reach each other through
// nothing but the supernode's relay: a direct dial between them fails at
// once (network unreachable), and so does hole punching.
const (
	relNetA = "10.201.1"
	relNetB = "10.201.2"
)

type relayNets struct{ s, a, b string }

// relayNetns creates the namespaces (removed by cl) or skips b naming
// what is missing.
func relayNetns(b *testing.B, cl *cleanups) relayNets {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("path=overlayd-relayed needs root to create network namespaces (ip netns add)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		b.Skipf("path=overlayd-relayed needs ip (iproute2) on PATH: %v", err)
	}
	var rnd [3]byte
	_, _ = rand.Read(rnd[:])
	prefix := "ovb" + hex.EncodeToString(rnd[:])
	n := relayNets{s: prefix + "-s", a: prefix + "-a", b: prefix + "-b"}
	run := func(args ...string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	if err := run("ip", "netns", "add", n.s); err != nil {
		b.Skipf("cannot create a network namespace: %v", err)
	}
	cl.add(func() {
		for _, ns := range []string{n.s, n.a, n.b} {
			_ = exec.Command("ip", "netns", "del", ns).Run()
		}
	})
	cmds := [][]string{
		{"ip", "netns", "add", n.a},
		{"ip", "netns", "add", n.b},
		{"ip", "link", "add", "sa", "netns", n.s, "type", "veth", "peer", "name", "as", "netns", n.a},
		{"ip", "link", "add", "sb", "netns", n.s, "type", "veth", "peer", "name", "bs", "netns", n.b},
		{"ip", "-n", n.s, "addr", "add", relNetA + ".1/24", "dev", "sa"},
		{"ip", "-n", n.s, "addr", "add", relNetB + ".1/24", "dev", "sb"},
		{"ip", "-n", n.a, "addr", "add", relNetA + ".2/24", "dev", "as"},
		{"ip", "-n", n.b, "addr", "add", relNetB + ".2/24", "dev", "bs"},
	}
	for _, ns := range []string{n.s, n.a, n.b} {
		cmds = append(cmds, []string{"ip", "-n", ns, "link", "set", "lo", "up"})
	}
	cmds = append(cmds,
		[]string{"ip", "-n", n.s, "link", "set", "sa", "up"}, []string{"ip", "-n", n.s, "link", "set", "sb", "up"},
		[]string{"ip", "-n", n.a, "link", "set", "as", "up"}, []string{"ip", "-n", n.b, "link", "set", "bs", "up"})
	for _, c := range cmds {
		if err := run(c...); err != nil {
			b.Fatal(err)
		}
	}
	// The namespace s must not forward between a and b. A new namespace
	// may inherit forwarding from the host's (net.core.devconf_inherit_init_net).
	if err := run("ip", "netns", "exec", n.s, "sh", "-c", "echo 0 > /proc/sys/net/ipv4/ip_forward"); err != nil {
		b.Fatal(err)
	}
	if data, err := exec.Command("ip", "netns", "exec", n.s, "cat", "/proc/sys/net/ipv4/ip_forward").Output(); err != nil || strings.TrimSpace(string(data)) != "0" {
		b.Fatalf("namespace %s forwards (ip_forward %q, %v): a and b could reach each other directly", n.s, data, err)
	}
	// And a direct dial from b to a fails for want of a route (a refused
	// connection would mean a is reachable).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := dialIn(ctx, n.b, relNetA+".2:4101")
	if err == nil {
		c.Close()
	}
	if !errors.Is(err, syscall.ENETUNREACH) {
		b.Fatalf("a direct dial from %s to %s.2 gave %v, want network unreachable", n.b, relNetA, err)
	}
	return n
}

// --- overlayd daemons ---

// ovStatus is the part of `overlayd status --json` the benchmarks read.
type ovStatus struct {
	PeerID     string          `json:"peer_id"`
	Addrs      []string        `json:"addrs"`
	Attachment json.RawMessage `json:"attachment"`
	Relay      *struct {
		Service     json.RawMessage `json:"service"`
		Reservation json.RawMessage `json:"reservation"`
	} `json:"relay"`
}

// ovDaemon is a running `overlayd run`.
type ovDaemon struct {
	*proc
	bin, dataDir, ns string
	metrics          string // host:port of /metrics, in ns
	id               string
}

var ovCommon = []string{"--mdns=false", "--announce-interval", "500ms", "--keepalive", "1s", "--retry-base", "100ms", "--log-level", "info"}

// startOverlayd runs `overlayd run` in ns with its data dir under dir and
// metrics on 127.0.0.1:metricsPort (in ns), and waits until its local API
// answers with a peer ID.
func startOverlayd(ctx context.Context, b *testing.B, cl *cleanups, bin, dir, ns, name string, metricsPort int, args ...string) *ovDaemon {
	b.Helper()
	d := &ovDaemon{bin: bin, dataDir: filepath.Join(dir, name), ns: ns, metrics: fmt.Sprintf("127.0.0.1:%d", metricsPort)}
	full := append([]string{"run", "--data-dir", d.dataDir, "--metrics-listen", d.metrics}, ovCommon...)
	d.proc = startProc(b, cl, dir, ns, name, nil, nil, bin, append(full, args...)...)
	st := d.waitStatus(ctx, b, "local API up", func(s ovStatus) bool { return s.PeerID != "" })
	d.id = st.PeerID
	return d
}

// status is `overlayd status --json` (through the unix socket in the data
// dir, which works from any network namespace).
func (d *ovDaemon) status(ctx context.Context) (ovStatus, error) {
	var st ovStatus
	out, err := runCmd(ctx, nil, d.bin, "status", "--json", "--data-dir", d.dataDir)
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal([]byte(out), &st)
}

func (d *ovDaemon) waitStatus(ctx context.Context, b *testing.B, what string, cond func(ovStatus) bool) ovStatus {
	b.Helper()
	var st ovStatus
	err := poll(ctx, 30*time.Second, 100*time.Millisecond, d.name+": "+what, func() (bool, error) {
		select {
		case <-d.exited:
			return false, fmt.Errorf("exited: %v", d.waitErr)
		default:
		}
		s, err := d.status(ctx)
		if err != nil {
			return false, err
		}
		st = s
		return cond(s), nil
	})
	if err != nil {
		b.Fatalf("%v\n%s log:\n%s", err, d.name, d.logTail())
	}
	return st
}

// cli runs an overlayd command against this daemon.
func (d *ovDaemon) cli(ctx context.Context, args ...string) (string, error) {
	return runCmd(ctx, nil, d.bin, append(args, "--data-dir", d.dataDir)...)
}

// metric reads one unlabelled series from the daemon's /metrics (0 if it
// is absent).
func (d *ovDaemon) metric(ctx context.Context, name string) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{
		DisableCompression: true,
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			return dialIn(ctx, d.ns, addr)
		},
	}}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+d.metrics+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	return 0, sc.Err()
}

// loopbackTCP is the daemon's /ip4/<ip>/tcp/<port>/p2p/<id> address on ip.
func loopbackTCP(st ovStatus, ip string) (string, error) {
	for _, a := range st.Addrs {
		if strings.HasPrefix(a, "/ip4/"+ip+"/tcp/") {
			return a + "/p2p/" + st.PeerID, nil
		}
	}
	return "", fmt.Errorf("no /ip4/%s/tcp address in %v", ip, st.Addrs)
}

// expose makes service (host:port, as the exposing daemon reaches it)
// reachable as name by the peer allow.
func (d *ovDaemon) expose(ctx context.Context, b *testing.B, name, service, allow string) {
	b.Helper()
	if _, err := d.cli(ctx, "expose", name, service, "--allow", allow); err != nil {
		b.Fatal(err)
	}
}

// connect opens a connect listener on listen for peer/name and returns the
// address it listens on.
func (d *ovDaemon) connect(ctx context.Context, b *testing.B, peerID, name, listen string) string {
	b.Helper()
	var addr string
	err := poll(ctx, 30*time.Second, 200*time.Millisecond, d.name+": connect", func() (bool, error) {
		out, err := d.cli(ctx, "connect", peerID+"/"+name, "--listen", listen)
		if err != nil {
			return false, err
		}
		// "listening on <addr> -> <peer-id>/<name>"
		f := strings.Fields(out)
		if len(f) < 3 || f[0] != "listening" || f[1] != "on" {
			return false, fmt.Errorf("connect printed %q", out)
		}
		addr = f[2]
		return true, nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return addr
}

// --- Kubo daemons ---

type kuboDaemon struct {
	*proc
	env []string // IPFS_PATH=...
	bin string
	id  string
}

// startKubo initialises an isolated Kubo repository (test profile:
// loopback only, no bootstrap, no mDNS), turns on p2p stream mounting,
// starts the daemon and waits until it is ready.
func startKubo(ctx context.Context, b *testing.B, cl *cleanups, bin, dir, name string) *kuboDaemon {
	b.Helper()
	repo := filepath.Join(dir, name)
	k := &kuboDaemon{env: []string{"IPFS_PATH=" + repo}, bin: bin}
	for _, args := range [][]string{
		{"init", "--profile", "test"},
		{"config", "--json", "Experimental.Libp2pStreamMounting", "true"},
		{"config", "--json", "Addresses.Swarm", `["/ip4/127.0.0.1/tcp/0"]`},
		{"config", "--json", "Bootstrap", "[]"},
		{"config", "Routing.Type", "none"},
	} {
		if _, err := runCmd(ctx, k.env, bin, args...); err != nil {
			b.Fatalf("kubo %s: %v", name, err)
		}
	}
	ready := make(chan struct{})
	var once sync.Once
	w := lineWatcher{match: "Daemon is ready", f: func() { once.Do(func() { close(ready) }) }}
	k.proc = startProc(b, cl, dir, "", name, k.env, &w, bin, "daemon", "--enable-gc=false")
	select {
	case <-ready:
	case <-k.exited:
		b.Fatalf("kubo %s exited: %v\n%s", name, k.waitErr, k.logTail())
	case <-time.After(60 * time.Second):
		b.Fatalf("kubo %s: not ready within 60 s\n%s", name, k.logTail())
	}
	out, err := runCmd(ctx, k.env, bin, "id", "-f", "<id>")
	if err != nil {
		b.Fatal(err)
	}
	k.id = strings.TrimSpace(out)
	return k
}

// swarmAddr is the daemon's loopback TCP address with /p2p/<id>.
func (k *kuboDaemon) swarmAddr(ctx context.Context, b *testing.B) string {
	b.Helper()
	out, err := runCmd(ctx, k.env, k.bin, "id")
	if err != nil {
		b.Fatal(err)
	}
	var id struct{ Addresses []string }
	if err := json.Unmarshal([]byte(out), &id); err != nil {
		b.Fatalf("ipfs id: %v\n%s", err, out)
	}
	for _, a := range id.Addresses {
		if strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
			return a
		}
	}
	b.Fatalf("ipfs id: no loopback TCP address in %v", id.Addresses)
	return ""
}

func (k *kuboDaemon) cli(ctx context.Context, b *testing.B, args ...string) string {
	b.Helper()
	out, err := runCmd(ctx, k.env, k.bin, args...)
	if err != nil {
		b.Fatal(err)
	}
	return out
}

// lineWatcher calls f when a written line contains match.
type lineWatcher struct {
	mu    sync.Mutex
	buf   []byte
	match string
	f     func()
}

func (w *lineWatcher) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	for {
		i := strings.IndexByte(string(w.buf), '\n')
		if i < 0 {
			break
		}
		if strings.Contains(string(w.buf[:i]), w.match) {
			w.f()
		}
		w.buf = w.buf[i+1:]
	}
	if len(w.buf) > 1<<16 {
		w.buf = w.buf[:0]
	}
	return len(p), nil
}
