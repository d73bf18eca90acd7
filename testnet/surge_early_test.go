package testnet

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/node/client"
)

// earlyEnv names the environment variable that turns this test binary into
// the surge benchmark's early-client process (see TestMain in main_test.go).
const earlyEnv = "OVERLAYD_SURGE_EARLY_HELPER"

// earlyConfig is what BenchmarkSurge tells its early-client process.
type earlyConfig struct {
	Boot      string `json:"boot"`
	Supernode string `json:"supernode"`
	Policy    string `json:"policy"`
	First     int    `json:"first"`
	Count     int    `json:"count"`
}

// earlyLine is one line the early-client process writes: a keepalive
// round trip ("ka": T when the pong arrived, RTT), a session end ("end",
// with its reason), a client that lost or changed its attachment ("lost",
// client I), "ready" once every client is attached to the supernode, "err"
// (Msg), and "bye" (Dropped lines the writer could not keep up with).
type earlyLine struct {
	Ev      string `json:"ev"`
	T       int64  `json:"t,omitempty"`
	RTT     int64  `json:"rtt,omitempty"`
	I       int    `json:"i,omitempty"`
	Msg     string `json:"msg,omitempty"`
	Dropped int    `json:"dropped,omitempty"`
}

// runEarlyHelper is the early-client process: it attaches cfg.Count
// ordinary nodes to the supernode, reports their keepalives and any change
// of attachment on out as JSON lines, and closes them when in ends. It
// measures the early clients' keepalives outside the process that runs
// the surge clients, whose scheduler the surge saturates: what it reports
// is the supernode's and the machine's delay, not the load generator's.
func runEarlyHelper(cfgJSON string, in io.Reader, out, errOut io.Writer) int {
	var cfg earlyConfig
	if err := json.Unmarshal([]byte(cfgJSON), &cfg); err != nil {
		fmt.Fprintf(errOut, "%s: %v\n", earlyEnv, err)
		return 2
	}
	lines := make(chan earlyLine, 1<<16)
	var dropped atomic.Int64
	emit := func(l earlyLine) {
		select {
		case lines <- l:
		default:
			dropped.Add(1)
		}
	}
	written := make(chan struct{})
	go func() {
		defer close(written)
		w := bufio.NewWriter(out)
		enc := json.NewEncoder(w)
		flush := time.NewTicker(20 * time.Millisecond)
		defer flush.Stop()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					w.Flush()
					return
				}
				_ = enc.Encode(l)
			case <-flush.C:
				w.Flush()
			}
		}
	}()
	defer func() {
		lines <- earlyLine{Ev: "bye", Dropped: int(dropped.Load())}
		close(lines)
		<-written
	}()

	obs := func(e client.Event) {
		switch e.Kind {
		case client.EventKeepalive:
			emit(earlyLine{Ev: "ka", T: e.Time.UnixNano(), RTT: int64(e.Latency)})
		case client.EventSessionEnd:
			emit(earlyLine{Ev: "end", Msg: e.Result})
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	net, err := startSurgeClients(ctx, cfg.Boot, cfg.Policy, cfg.First, cfg.Count, obs, nil)
	if err != nil {
		emit(earlyLine{Ev: "err", Msg: err.Error()})
		return 1
	}
	defer net.Close()
	nodes := net.Clients()
	ok := func(n *node.Node) bool {
		st := n.Status()
		return st.Attachment != nil && st.Attachment.Supernode == cfg.Supernode && st.Failovers == 0
	}
	err = waitFor(ctx, 30*time.Second, 20*time.Millisecond, func() bool {
		for _, n := range nodes {
			if !ok(n) {
				return false
			}
		}
		return true
	})
	if err != nil {
		emit(earlyLine{Ev: "err", Msg: "early clients did not all attach: " + err.Error()})
		return 1
	}
	emit(earlyLine{Ev: "ready"})

	// Watch the attachments until in ends (the benchmark closes it).
	eof := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, in); close(eof) }()
	lost := make([]bool, len(nodes))
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-eof:
			return 0
		case <-tick.C:
		}
		for i, n := range nodes {
			if !lost[i] && !ok(n) {
				lost[i] = true
				emit(earlyLine{Ev: "lost", I: i})
			}
		}
	}
}

// earlyProc is BenchmarkSurge's handle on its early-client process.
type earlyProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	ready chan struct{}
	done  chan struct{} // the reader saw the end of the output

	mu      sync.Mutex
	lost    map[int]bool
	errMsg  string
	dropped int
	bye     bool
}

// startEarly starts the early-client process with count clients numbered
// from first, recording their keepalives and session ends in rec, and
// returns once every one is attached to the supernode snID.
func startEarly(ctx context.Context, b *testing.B, lp launcher, dir, boot, snID, policy string, first, count int, rec *surgeRecorder) *earlyProc {
	b.Helper()
	cfg, err := json.Marshal(earlyConfig{Boot: boot, Supernode: snID, Policy: policy, First: first, Count: count})
	if err != nil {
		b.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	logPath := filepath.Join(dir, "early.log")
	logf, err := os.Create(logPath)
	if err != nil {
		b.Fatal(err)
	}
	p := &earlyProc{ready: make(chan struct{}), done: make(chan struct{}), lost: map[int]bool{}}
	p.cmd = lp.command(exe, "-test.run=^$", "-test.bench=^$")
	p.cmd.Env = append(os.Environ(), earlyEnv+"="+string(cfg))
	p.cmd.Stderr = logf
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		b.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		b.Fatalf("start early-client process: %v", err)
	}
	b.Cleanup(func() { p.stop(); logf.Close() })
	go p.read(stdout, rec)
	select {
	case <-p.ready:
		return p
	case <-p.done:
	case <-ctx.Done():
	case <-time.After(45 * time.Second):
	}
	p.stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	b.Fatalf("early-client process not ready: %q; log:\n%s", p.errMsg, tail(logPath, 4096))
	return nil
}

func (p *earlyProc) read(stdout io.Reader, rec *surgeRecorder) {
	defer close(p.done)
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		var l earlyLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			p.mu.Lock()
			p.errMsg = fmt.Sprintf("bad line %q: %v", sc.Text(), err)
			p.mu.Unlock()
			continue
		}
		switch l.Ev {
		case "ka":
			rec.mu.Lock()
			rec.keepalives = append(rec.keepalives, kaRec{time.Unix(0, l.T), time.Duration(l.RTT)})
			rec.mu.Unlock()
		case "end":
			rec.mu.Lock()
			rec.allEnds++
			rec.sessionEnds = append(rec.sessionEnds, l.Msg)
			rec.mu.Unlock()
		case "lost":
			p.mu.Lock()
			p.lost[l.I] = true
			p.mu.Unlock()
		case "ready":
			close(p.ready)
		case "err":
			p.mu.Lock()
			p.errMsg = l.Msg
			p.mu.Unlock()
		case "bye":
			p.mu.Lock()
			p.bye, p.dropped = true, l.Dropped
			p.mu.Unlock()
		}
	}
}

// lostClients returns the indexes of the clients that lost or changed
// their attachment so far.
func (p *earlyProc) lostClients() []int {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for i := range p.lost {
		out = append(out, i)
	}
	return out
}

// stop closes the clients (by closing the process's stdin) and waits for
// the process, killing it after 20 s. It returns an error if the process
// failed or dropped keepalive lines. It is idempotent.
func (p *earlyProc) stop() error {
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
		select {
		case <-p.done:
		case <-time.After(20 * time.Second):
			p.cmd.Process.Kill()
			<-p.done
		}
		_ = p.cmd.Wait()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case !p.bye:
		return fmt.Errorf("early-client process ended without its last line (%v)", p.cmd.ProcessState)
	case p.dropped > 0:
		return fmt.Errorf("early-client process dropped %d lines", p.dropped)
	}
	return nil
}
