package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/overlayd/overlayd/overlay/backoff"
	"github.com/overlayd/overlayd/supernode"
)

// Params is everything the simulator models rather than runs: the network,
// the supernodes' CPU, and the settings the daemon would take from its
// configuration. Every field has a default in DefaultParams, which says
// where it comes from: a measurement (with its command), the daemon's own
// default, or a guess (marked so).
type Params struct {
	// Network.

	// LatencyMin and LatencyMean bound one hop's one-way delay: LatencyMin
	// plus an exponential part of mean LatencyMean-LatencyMin. Guess: 20 ms
	// and 60 ms, a wide-area path (the testnet's loopback is ~0.1 ms).
	LatencyMin, LatencyMean time.Duration
	// Loss is the probability that an attach attempt's request or answer
	// is lost; the client then waits AttemptTimeout. Guess: 0.
	Loss float64
	// DeadDial is how long an attempt to a crashed supernode takes to
	// fail. Default: one round trip (connection refused, as in the
	// testnet's crashes); a vanished host costs AttemptTimeout instead.
	DeadDial time.Duration
	// CrashResets: a crashed supernode's connections are closed (its
	// process died and the kernel closed its sockets, or the testnet's
	// CloseAbruptlyForTest closed its host), so its clients read the end
	// of their session one hop later. Off, the host vanished and they
	// notice by keepalive silence. Default: off (guess: the harder case).
	CrashResets bool
	// AttemptTimeout bounds one attempt (node/client's attemptTimeout, 5 s).
	AttemptTimeout time.Duration

	// Supernode CPU. Work is queued per supernode and served by Cores;
	// the queueing delay is what a request waits before its turn.

	// Cores is each supernode's CPU. Guess: 1.
	Cores float64
	// AttemptCPU is the CPU one attach attempt costs a supernode,
	// connection setup included, answered BUSY or REDIRECT. Measured:
	// 1.9 ms, the real binary's side of a BUSY on a fresh connection
	// (TCP, the TLS 1.3 handshake, yamux, identify, GossipSub's hello, the
	// attach protocol and its presence check, the teardown): median of 9
	// runs (3 invocations of -count 3, load average 3.5-10) of 1.39-2.05
	// ms, `OVERLAYD_COST_DAEMON=1 go test -run '^$' -bench
	// 'BenchmarkCostDaemon' -benchtime 3s -count 3 ./testnet`
	// (answer=busy/conn=fresh, daemon-cpu-µs/op). On a connection the
	// client still holds, a retry costs 0.15 ms (answer=busy/conn=existing);
	// the simulator does not tell them apart, so this is the upper figure.
	AttemptCPU time.Duration
	// AcceptCPU is the extra CPU of an accepted attach (session state,
	// the presence claim's handling, the session's teardown). Measured:
	// 0.16 ms, the real binary's ACCEPT less its BUSY on fresh connections
	// (medians of 9 runs: 2.04 ms - 1.88 ms; the runs' spread is larger
	// than the difference), and 0.125 ms on existing connections (0.275 -
	// 0.15 ms, steadier), same command (answer=accept/...).
	AcceptCPU time.Duration
	// KeepaliveCPU is one keepalive ping and pong. Measured: 50 µs, the
	// real binary's side, 16 sessions pinging every 10 ms, median of 9
	// runs of 44-56 µs, same command (keepalive/sessions=16).
	KeepaliveCPU time.Duration
	// SessionCPU is the rest of an attached client's steady cost per
	// second (presence, messages). It is set so that a supernode at its
	// capacity is busy UtilAtCapacity of the time (with keepalives and
	// announcement checks): see Sim. UtilAtCapacity is the operator's
	// headroom. Guess: 0.8.
	UtilAtCapacity float64
	// VerifyCPU is one announcement's verification (GossipSub's signature
	// check, then the node's validator: rate limits, decode, Apply),
	// paid by every supernode for every announcement. Measured: 45 µs in
	// an open network, median of 6 runs (2 invocations of -count 3) of
	// 42-50 µs (89 µs with a supernode certificate, 89 µs for a mega's):
	// `go test -run '^$' -bench 'BenchmarkCostVerify' -benchtime 3s
	// -count 3 ./testnet`. GossipSub's forwarding of the message to the
	// mesh is not included.
	VerifyCPU time.Duration
	// FailDelay and FailAfter are overload: a supernode whose queueing
	// delay stays above FailDelay for FailAfter fails (it crashes, as
	// Skype's did in 2010). Guess: 5 s for 10 s. This models the 2010
	// software: overlayd's supernode, offered attempts beyond its CPU,
	// answers them late (seconds) and loses the sessions whose pongs
	// come later than the keepalive silence, but it did not fail
	// (BenchmarkCostOverload, testnet/cost_overload_test.go). So only
	// supernodes without an admission limit (the 2010 policy) fail;
	// with one, overload costs sessions, not the supernode.
	FailDelay, FailAfter time.Duration

	// One process. The in-process testnet runs every node, clients and
	// supernodes alike, in one process on the machine's cores: then
	// ProcessCores > 0 and all their work shares one CPU (Cores,
	// SessionCPU and VerifyCPU do not apply; ProcessBackground stands for
	// the steady state and keeps its share; the attempts are served in
	// order beside the crash's work, the two sharing what is left). 0, the
	// default: every supernode is its own machine and clients cost
	// nothing.

	// ProcessCores is the process's cores (GOMAXPROCS).
	ProcessCores float64
	// ProcessBackground is the cores the process spends in its steady
	// state: keepalives, announcements, GossipSub's heartbeats, the
	// runtime.
	ProcessBackground float64
	// CrashCPU is the work a crash costs the process per crashed
	// supernode, beyond the clients' attempts: the crashed host's
	// teardown and every other node's reaction to its closed connections.
	CrashCPU time.Duration
	// DialCPU is the client's side of an attempt to a live supernode (its
	// half of the connection's handshakes); AttemptCPU and AcceptCPU are
	// the supernode's.
	DialCPU time.Duration
	// DeadDialCPU is a dial to a crashed supernode (refused).
	DeadDialCPU time.Duration

	// Daemon settings (config.Default and package defaults).

	// AnnounceInterval is the supernodes' announce interval (10 s).
	AnnounceInterval time.Duration
	// Keepalive is the session keepalive (supernode.DefaultKeepalive,
	// 5 s); a session silent for protocol.MissedKeepalives of them is dead.
	Keepalive time.Duration
	// RetryAfter is the BUSY hint (supernode.DefaultRetryAfter, 2 s).
	RetryAfter time.Duration
	// Backoff is the clients' retry policy (--retry-base 1s, --retry-max 1m).
	Backoff backoff.Policy
	// FixedRetry is the 2010 policy's and the no-jitter ablation's fixed
	// retry interval. Default: 1 s, the surge benchmark's naive client.
	FixedRetry time.Duration
	// ReturnInterval is the mean pause between a failed-over client's
	// checks for room at home (--return-interval, 30 s).
	ReturnInterval time.Duration
	// DrainPeriod is how long a demoted mega takes to hand its clients
	// back (--drain-period, config.Default: 1 m).
	DrainPeriod time.Duration
	// DirectoryTick is how often the shared directory expires entries and
	// the ring is rebuilt when membership changed. The daemon does this
	// on change with a debounce; 250 ms is its order of magnitude.
	DirectoryTick time.Duration
	// Sample is the time series' step (attempts are counted per 100 ms).
	Sample time.Duration
}

// DefaultParams returns the defaults documented on Params.
func DefaultParams() Params {
	return Params{
		LatencyMin:       20 * time.Millisecond,
		LatencyMean:      60 * time.Millisecond,
		Loss:             0,
		DeadDial:         120 * time.Millisecond,
		AttemptTimeout:   5 * time.Second,
		Cores:            1,
		AttemptCPU:       1900 * time.Microsecond,
		AcceptCPU:        160 * time.Microsecond,
		KeepaliveCPU:     50 * time.Microsecond,
		UtilAtCapacity:   0.8,
		VerifyCPU:        45 * time.Microsecond,
		FailDelay:        5 * time.Second,
		FailAfter:        10 * time.Second,
		AnnounceInterval: 10 * time.Second,
		Keepalive:        supernode.DefaultKeepalive,
		RetryAfter:       supernode.DefaultRetryAfter,
		Backoff:          backoff.DefaultPolicy(),
		FixedRetry:       time.Second,
		ReturnInterval:   30 * time.Second,
		DrainPeriod:      time.Minute,
		DirectoryTick:    250 * time.Millisecond,
		Sample:           time.Second,
	}
}

// Validate names the first field out of range.
func (p Params) Validate() error {
	pos := []struct {
		name string
		d    time.Duration
	}{
		{"AttemptTimeout", p.AttemptTimeout}, {"AnnounceInterval", p.AnnounceInterval},
		{"Keepalive", p.Keepalive}, {"FixedRetry", p.FixedRetry}, {"ReturnInterval", p.ReturnInterval},
		{"DirectoryTick", p.DirectoryTick}, {"DrainPeriod", p.DrainPeriod}, {"Sample", p.Sample}, {"FailAfter", p.FailAfter}, {"FailDelay", p.FailDelay},
	}
	for _, f := range pos {
		if f.d <= 0 {
			return fmt.Errorf("sim: params: %s must be > 0, got %v", f.name, f.d)
		}
	}
	switch {
	case p.LatencyMin < 0 || p.LatencyMean < p.LatencyMin:
		return fmt.Errorf("sim: params: want 0 <= LatencyMin <= LatencyMean, got %v and %v", p.LatencyMin, p.LatencyMean)
	case p.Loss < 0 || p.Loss >= 1:
		return fmt.Errorf("sim: params: Loss must be in [0, 1), got %v", p.Loss)
	case p.Cores <= 0:
		return fmt.Errorf("sim: params: Cores must be > 0, got %v", p.Cores)
	case p.UtilAtCapacity <= 0 || p.UtilAtCapacity > 1:
		return fmt.Errorf("sim: params: UtilAtCapacity must be in (0, 1], got %v", p.UtilAtCapacity)
	case p.DeadDial < 0 || p.AttemptCPU < 0 || p.AcceptCPU < 0 || p.KeepaliveCPU < 0 || p.VerifyCPU < 0 || p.RetryAfter < 0 ||
		p.CrashCPU < 0 || p.DialCPU < 0 || p.DeadDialCPU < 0:
		return errors.New("sim: params: CPU costs, DeadDial and RetryAfter must be >= 0")
	case p.ProcessCores < 0 || p.ProcessBackground < 0 || (p.ProcessCores > 0 && p.ProcessBackground >= p.ProcessCores):
		return fmt.Errorf("sim: params: want 0 <= ProcessBackground < ProcessCores (or ProcessCores 0), got %v and %v", p.ProcessBackground, p.ProcessCores)
	case p.Sample%(100*time.Millisecond) != 0:
		return fmt.Errorf("sim: params: Sample must be a multiple of 100ms, got %v", p.Sample)
	}
	if err := p.Backoff.Validate(); err != nil {
		return fmt.Errorf("sim: params: %w", err)
	}
	return nil
}

// Policy is the protocol the simulated network runs: overlayd as shipped,
// the 2010 one, or overlayd with one protection switched off.
type Policy struct {
	Name string `json:"name"`
	// Admission: supernodes refuse (BUSY) beyond their capacity. Off, they
	// accept until overloaded.
	Admission bool `json:"admission"`
	// Jitter: full-jitter exponential backoff between passes. Off, a fixed
	// interval (Params.FixedRetry).
	Jitter bool `json:"jitter"`
	// Stagger: the first pass after a session ends is spread over a
	// window (node/client FailoverSpread). Off, at once.
	Stagger bool `json:"stagger"`
	// Alternatives: BUSY answers carry alternatives.
	Alternatives bool `json:"alternatives"`
	// Megas: the scenario's mega-supernodes are promoted.
	Megas bool `json:"megas"`
}

// Policies returns the policies by name, in a fixed order.
func Policies() []Policy {
	all := Policy{Admission: true, Jitter: true, Stagger: true, Alternatives: true, Megas: true}
	with := func(name string, f func(*Policy)) Policy {
		p := all
		p.Name = name
		f(&p)
		return p
	}
	return []Policy{
		with("overlayd", func(*Policy) {}),
		{Name: "2010"},
		with("no-jitter", func(p *Policy) { p.Jitter = false }),
		with("no-busy-alternatives", func(p *Policy) { p.Alternatives = false }),
		with("no-megas", func(p *Policy) { p.Megas = false }),
		with("no-stagger", func(p *Policy) { p.Stagger = false }),
	}
}

// PolicyNames returns the names of Policies.
func PolicyNames() []string {
	var out []string
	for _, p := range Policies() {
		out = append(out, p.Name)
	}
	return out
}

// FindPolicy returns the policy called name.
func FindPolicy(name string) (Policy, error) {
	for _, p := range Policies() {
		if p.Name == name {
			return p, nil
		}
	}
	return Policy{}, fmt.Errorf("unknown policy %q (have %v)", name, PolicyNames())
}
