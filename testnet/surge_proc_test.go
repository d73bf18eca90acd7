package testnet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/localapi"
)

// buildOverlayd builds the real, static overlayd binary, as
// cmd/overlayd/main_test.go does.
func buildOverlayd(b *testing.B) string {
	b.Helper()
	bin := filepath.Join(b.TempDir(), "overlayd")
	//lint:ignore SA1019 the toolchain running this test is the one to build with
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", bin, "../cmd/overlayd")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build overlayd: %v\n%s", err, out)
	}
	return bin
}

// daemon is an `overlayd run` process with its metrics listener on a free
// loopback port.
type daemon struct {
	name    string
	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logPath string
	metrics string // base URL of the metrics listener
	hc      *http.Client
	stopped sync.Once
}

func freeLoopbackPort(b *testing.B) int {
	b.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	return port
}

// startDaemon runs `overlayd run args... --metrics-listen 127.0.0.1:<free>`,
// logging to dir/<name>.log, and returns once its metrics answer. The
// process is stopped at cleanup.
func startDaemon(ctx context.Context, b *testing.B, lp launcher, bin, dir, name string, args ...string) *daemon {
	b.Helper()
	port := freeLoopbackPort(b)
	d := &daemon{
		name:    name,
		exited:  make(chan struct{}),
		logPath: filepath.Join(dir, name+".log"),
		metrics: fmt.Sprintf("http://127.0.0.1:%d", port),
		// No gzip: promhttp pools its gzip writers, and the pool would
		// show up in the heap being measured.
		hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableCompression: true}},
	}
	logf, err := os.Create(d.logPath)
	if err != nil {
		b.Fatal(err)
	}
	args = append([]string{"run"}, args...)
	args = append(args, "--metrics-listen", fmt.Sprintf("127.0.0.1:%d", port))
	d.cmd = lp.command(bin, args...)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		logf.Close()
		b.Fatalf("start %s: %v", name, err)
	}
	go func() { d.waitErr = d.cmd.Wait(); logf.Close(); close(d.exited) }()
	b.Cleanup(func() {
		if err := d.stop(); err != nil {
			b.Errorf("%s: %v", name, err)
		}
		if t := tail(d.logPath, 4096); b.Failed() && t != "" {
			b.Logf("%s log (tail):\n%s", name, t)
		}
	})
	// Polling an external process: there is no event to wait on.
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := d.scrape(ctx)
		if err == nil {
			return d
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s: metrics never answered: %v", name, err)
		}
		select {
		case <-d.exited:
			b.Fatalf("%s exited: %v; log:\n%s", name, d.waitErr, tail(d.logPath, 4096))
		case <-ctx.Done():
			b.Fatalf("%s: %v", name, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// startSupernode runs the supernode under test and returns it with its peer
// ID and /p2p/ multiaddr, read through the local API client.
func startSupernode(ctx context.Context, b *testing.B, lp launcher, bin, dir string, capacity int, announce time.Duration) (*daemon, peer.ID, string) {
	b.Helper()
	dataDir := filepath.Join(dir, "sn")
	d := startDaemon(ctx, b, lp, bin, dir, "supernode", "--role", "supernode", "--capacity", strconv.Itoa(capacity),
		"--data-dir", dataDir, "--listen", "/ip4/127.0.0.1/tcp/0",
		"--announce-interval", announce.String(), "--keepalive", "1s", "--busy-retry-after", surgeRetryAfter.String())
	// The API starts before the metrics listener, so it is up.
	st, err := localapi.NewClient(dataDir).Status(ctx)
	if err != nil {
		b.Fatalf("supernode status: %v", err)
	}
	id, err := peer.Decode(st.PeerID)
	if err != nil {
		b.Fatalf("supernode peer ID %q: %v", st.PeerID, err)
	}
	for _, a := range st.Addrs {
		if strings.HasPrefix(a, "/ip4/127.0.0.1/tcp/") {
			return d, id, a + "/p2p/" + st.PeerID
		}
	}
	b.Fatalf("supernode has no loopback TCP address: %v", st.Addrs)
	return nil, "", ""
}

// stop ends the process with SIGTERM and waits for it (killing it after
// 10 s). It is idempotent.
func (d *daemon) stop() error {
	var err error
	d.stopped.Do(func() {
		select {
		case <-d.exited:
			err = fmt.Errorf("exited early: %v", d.waitErr)
			return
		default:
		}
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
			if d.waitErr != nil {
				err = fmt.Errorf("exit after SIGTERM: %w", d.waitErr)
			}
		case <-time.After(10 * time.Second):
			_ = d.cmd.Process.Kill()
			<-d.exited
			err = errors.New("still running 10 s after SIGTERM; killed")
		}
	})
	return err
}

func (d *daemon) get(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, d.metrics+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := d.hc.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return resp.Body, nil
}

// Series the benchmark reads.
const (
	seriesHeap       = "go_memstats_heap_alloc_bytes"
	seriesGoroutines = "go_goroutines"
	seriesCPU        = "process_cpu_seconds_total"
	seriesAttached   = `overlayd_supernode_semaphore_in_use{semaphore="attached_peers"}`
	seriesRefused    = `overlayd_supernode_semaphore_refused_total{semaphore="attached_peers"}`
	seriesClientAtt  = "overlayd_client_attached"
	seriesFailovers  = "overlayd_client_failovers_total"
	seriesKeepalive  = "overlayd_client_keepalive_rtt_seconds"
)

func (d *daemon) scrape(ctx context.Context) (promSample, error) {
	body, err := d.get(ctx, "/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	s, err := parseProm(body)
	if err != nil {
		return nil, err
	}
	if _, ok := s[seriesHeap]; !ok {
		return nil, fmt.Errorf("metrics: no %s", seriesHeap)
	}
	return s, nil
}

// settled forces two GCs in the process (GET /debug/pprof/heap?gc=1,
// twice: sync.Pool contents survive exactly one collection, and the pools
// of the surge's buffers would otherwise count as retained) and then reads
// its metrics. The second heap profile is saved as
// $OVERLAYD_REPORT_DIR/<profile> when the variable is set.
func (d *daemon) settled(ctx context.Context, profile string) (promSample, error) {
	for i := range 2 {
		body, err := d.get(ctx, "/debug/pprof/heap?gc=1")
		if err != nil {
			return nil, err
		}
		err = saveReport(profile, body, i == 1)
		body.Close()
		if err != nil {
			return nil, fmt.Errorf("heap profile: %w", err)
		}
	}
	return d.scrape(ctx)
}

func tail(path string, n int64) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if int64(len(b)) > n {
		b = b[int64(len(b))-n:]
	}
	return string(b)
}

// launcher starts a process, under `taskset -c cpus` when cpus is set.
type launcher struct{ cpus string }

func (l launcher) command(bin string, args ...string) *exec.Cmd {
	if l.cpus == "" {
		return exec.Command(bin, args...)
	}
	return exec.Command("taskset", append([]string{"-c", l.cpus, bin}, args...)...)
}

// otherCPUs returns, as a taskset list, the online CPUs this process may
// not run on (Linux), or an error when there are none.
func otherCPUs() (string, error) {
	online, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return "", err
	}
	all, err := parseCPUList(strings.TrimSpace(string(online)))
	if err != nil {
		return "", fmt.Errorf("online CPUs: %w", err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "", err
	}
	var mine map[int]bool
	for line := range strings.Lines(string(status)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			if mine, err = parseCPUList(strings.TrimSpace(v)); err != nil {
				return "", fmt.Errorf("allowed CPUs: %w", err)
			}
		}
	}
	var others []string
	for _, c := range slices.Sorted(maps.Keys(all)) {
		if !mine[c] {
			others = append(others, strconv.Itoa(c))
		}
	}
	if mine == nil || len(others) == 0 {
		return "", errors.New("this process may run on every CPU: start it under taskset (e.g. taskset -c 1 go test ...) to leave CPUs to the supernode")
	}
	return strings.Join(others, ","), nil
}

// parseCPUList parses a Linux CPU list such as "0-3,6".
func parseCPUList(s string) (map[int]bool, error) {
	out := map[int]bool{}
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", s, err)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a {
				return nil, fmt.Errorf("%q: bad range %q", s, part)
			}
		}
		for c := a; c <= z; c++ {
			out[c] = true
		}
	}
	return out, nil
}
