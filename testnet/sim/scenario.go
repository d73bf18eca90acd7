package sim

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/overlayd/overlayd/overlay/backoff"
)

// Config is one simulation run: a scenario on a network under a policy.
type Config struct {
	Scenario string `json:"scenario"`
	Policy   Policy `json:"policy"`
	Seed     uint64 `json:"seed"`
	// Clients and Supernodes are the ordinary nodes and the regular
	// supernodes at the start.
	Clients    int `json:"clients"`
	Supernodes int `json:"supernodes"`
	// Capacity is each regular supernode's capacity (attached clients).
	Capacity int `json:"capacity"`
	// Megas are extra supernodes of capacity MegaBefore that the operator
	// promotes to mega-supernodes of MegaCapacity at the failure (when
	// the policy has megas; otherwise they stay as they are).
	Megas        int `json:"megas"`
	MegaBefore   int `json:"mega_capacity_before"`
	MegaCapacity int `json:"mega_capacity"`
	// CrashFraction of the regular supernodes (never the first) crash at
	// CrashAt, without a departure announcement.
	CrashFraction float64       `json:"crash_fraction"`
	CrashAt       time.Duration `json:"crash_at"`
	// RestartWindow: every client restarts once, at a uniform time in
	// [CrashAt, CrashAt+RestartWindow) (0: no restarts).
	RestartWindow time.Duration `json:"restart_window"`
	// ChurnMean: from CrashAt on, every client restarts again and again,
	// the intervals exponential of this mean (0: no churn).
	ChurnMean time.Duration `json:"churn_mean"`
	// HandBackAt: with megas, the crashed supernodes restart (new
	// processes, their old identities, empty), and once they are in the
	// directory the operator demotes the megas, which hand their clients
	// above their regular capacity back over Params.DrainPeriod
	// (node/role.DrainStep: the daemon's schedule). 0: never.
	HandBackAt time.Duration `json:"handback_at"`
	// Duration is the simulated time.
	Duration time.Duration `json:"duration"`
	Params   Params        `json:"params"`
	// Auto is the --role auto population (the auto-roles scenario; nil:
	// none).
	Auto *AutoRoles `json:"auto_roles,omitempty"`
}

// Scenario is a named network and schedule.
type Scenario struct {
	Name    string
	Summary string
	// defaults fills a Config for clients and supernodes (0: the
	// scenario's own).
	defaults func(c *Config)
}

// Scenarios lists the scenarios.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "skype2010", Summary: "30% of the supernodes crash at once at a peak hour (90% full); their clients, and every client whose session breaks, retry",
			defaults: skype2010},
		{Name: "restart-wave", Summary: "a client release: every client restarts once within 10 minutes (leaves with a Detach, comes back after waiting for its ring); no supernode crashes",
			defaults: restartWave},
		{Name: "churn", Summary: "clients leave and come back at a steady rate (each restarts every 10 minutes on average); no supernode crashes",
			defaults: churn},
		{Name: "recovery", Summary: "testnet.BenchmarkRecovery's network: 20 supernodes of capacity 40, 600 clients, 30% crash, 3 megas of 200 promoted at the crash; 60 s later the crashed ones restart and the megas are demoted and hand back",
			defaults: recovery},
		{Name: "auto-roles", Summary: "supernodes promoted by --role auto: 5% of the clients are public auto nodes, the network forms from a few pinned supernodes (one per 2,000 clients, at least 3); at 20 minutes 30% of the supernodes crash and the auto tier re-forms",
			defaults: autoRoles},
	}
}

// ScenarioNames lists the scenarios' names.
func ScenarioNames() []string {
	var out []string
	for _, s := range Scenarios() {
		out = append(out, s.Name)
	}
	return out
}

// NewConfig returns the scenario's configuration for policy, with
// clients and supernodes (0 keeps the scenario's own), seed and the
// default parameters.
func NewConfig(scenario string, policy Policy, clients, supernodes int, seed uint64) (Config, error) {
	for _, s := range Scenarios() {
		if s.Name != scenario {
			continue
		}
		c := Config{Scenario: scenario, Policy: policy, Seed: seed, Clients: clients, Supernodes: supernodes, Params: DefaultParams()}
		s.defaults(&c)
		return c, c.Validate()
	}
	return Config{}, fmt.Errorf("unknown scenario %q (have %s)", scenario, strings.Join(ScenarioNames(), ", "))
}

// skype2010: 10,000 clients and 100 supernodes unless told, filled to
// 90%, 30% crash 10 s in, megas of 5 × capacity enough for 1.5 × the
// clients the survivors cannot hold, 10 simulated minutes.
func skype2010(c *Config) {
	if c.Clients == 0 {
		c.Clients = 10000
	}
	if c.Supernodes == 0 {
		c.Supernodes = max(1, c.Clients/100)
	}
	const fill = 0.9
	c.Capacity = max(1, int(math.Ceil(float64(c.Clients)/float64(c.Supernodes)/fill)))
	c.CrashFraction, c.CrashAt, c.Duration = 0.3, 10*time.Second, 10*time.Minute
	c.MegaBefore, c.MegaCapacity = 1, 5*c.Capacity
	survivors := c.Supernodes - int(math.Round(c.CrashFraction*float64(c.Supernodes)))
	short := float64(c.Clients - survivors*c.Capacity)
	c.Megas = max(1, int(math.Ceil(1.5*short/float64(c.MegaCapacity))))
	if !c.Policy.Megas {
		// No operator tier at all (the recovery scenario keeps its
		// would-be megas as small regular supernodes instead, as the
		// testnet's benchmark does).
		c.Megas = 0
	}
}

// restartWave: 10,000 clients and 100 supernodes unless told, 90% full,
// every client restarting within 10 minutes from 10 s in, 11 simulated
// minutes, no crash and no megas.
func restartWave(c *Config) {
	if c.Clients == 0 {
		c.Clients = 10000
	}
	if c.Supernodes == 0 {
		c.Supernodes = max(1, c.Clients/100)
	}
	c.Capacity = max(1, int(math.Ceil(float64(c.Clients)/float64(c.Supernodes)/0.9)))
	c.CrashAt, c.RestartWindow, c.Duration = 10*time.Second, 10*time.Minute, 11*time.Minute
	c.MegaBefore, c.MegaCapacity = 1, 5*c.Capacity
}

// churn: restart-wave's network, every client restarting on average
// every 10 minutes (a Poisson process per client), 10 simulated minutes.
func churn(c *Config) {
	restartWave(c)
	c.RestartWindow, c.ChurnMean, c.Duration = 0, 10*time.Minute, 10*time.Minute
}

// recovery: testnet.BenchmarkRecovery at full scale (docs/BENCHMARKS.md,
// "Mega-supernode recovery"): 20 × 40, 600 clients, 3 megas of capacity 1
// promoted to 200, keepalive 1 s, retry-after 1 s, retry 500 ms–4 s,
// return interval 5 s, announce interval 5 s, one process on loopback, a
// 60 s window after the crash.
func recovery(c *Config) {
	if c.Clients == 0 {
		c.Clients = 600
	}
	if c.Supernodes == 0 {
		c.Supernodes = 20
	}
	c.Capacity = max(1, int(math.Ceil(float64(c.Clients)/float64(c.Supernodes)/0.75)))
	c.Megas, c.MegaBefore, c.MegaCapacity = 3, 1, 5*c.Capacity
	// The 60 s window, then the restart of the crashed supernodes, the
	// demotion and up to 45 s of hand-back, as the benchmark does.
	c.CrashFraction, c.CrashAt, c.HandBackAt, c.Duration = 0.3, 5*time.Second, 65*time.Second, 110*time.Second
	p := &c.Params
	p.DrainPeriod = 10 * time.Second
	// The testnet crashes a supernode with CloseAbruptlyForTest, which
	// closes its host: the clients read the end of their sessions at once.
	p.CrashResets = true
	p.Keepalive, p.RetryAfter = time.Second, time.Second
	p.Backoff = backoff.Policy{Base: 500 * time.Millisecond, Max: 4 * time.Second, MaxRetryAfter: 10 * time.Minute}
	p.ReturnInterval, p.AnnounceInterval = 5*time.Second, 5*time.Second
	// Loopback in one busy process. Guess: 0.2 ms to 1 ms per hop.
	p.LatencyMin, p.LatencyMean, p.DeadDial = 200*time.Microsecond, time.Millisecond, 2*time.Millisecond
	// Every node in one process of 2 cores (GOMAXPROCS on this machine).
	// Measured, see docs/BENCHMARKS.md "Validation against the real
	// testnet": the process's steady state and the crash's own work are
	// the medians of six real runs of BenchmarkValidateRecovery (from the
	// process's CPU, not from their times); an attempt on a fresh
	// loopback connection, both halves, and a refused dial by
	// testnet.BenchmarkCostAttach (`go test -run '^$' -bench
	// BenchmarkCostAttach ./testnet`).
	p.ProcessCores, p.ProcessBackground, p.CrashCPU = 2, 1.12, 191*time.Millisecond
	p.DialCPU, p.AttemptCPU, p.AcceptCPU = 1650*time.Microsecond, 1000*time.Microsecond, 200*time.Microsecond
	p.DeadDialCPU = 78 * time.Microsecond
	p.Sample = 200 * time.Millisecond
}

// Validate names the first field out of range.
func (c Config) Validate() error {
	switch {
	case c.Clients < 1:
		return fmt.Errorf("sim: clients must be >= 1, got %d", c.Clients)
	case c.Supernodes < 1:
		return fmt.Errorf("sim: supernodes must be >= 1, got %d", c.Supernodes)
	case c.Supernodes+c.Megas > 1<<16:
		return fmt.Errorf("sim: at most %d supernodes and megas (the ring's bound), got %d", 1<<16, c.Supernodes+c.Megas)
	case c.Clients > 1<<30:
		return fmt.Errorf("sim: at most %d clients, got %d", 1<<30, c.Clients)
	case c.Capacity < 1 || c.MegaCapacity < 0 || c.MegaBefore < 0 || c.Megas < 0:
		return fmt.Errorf("sim: capacities must be >= 1 and megas >= 0")
	case c.CrashFraction < 0 || c.CrashFraction > 1:
		return fmt.Errorf("sim: crash fraction must be in [0, 1], got %v", c.CrashFraction)
	case c.Duration <= 0 || c.CrashAt < 0 || c.RestartWindow < 0 || c.ChurnMean < 0:
		return fmt.Errorf("sim: duration must be > 0 and crash time >= 0")
	case c.HandBackAt != 0 && (c.HandBackAt <= c.CrashAt || c.HandBackAt >= c.Duration):
		return fmt.Errorf("sim: the hand-back (at %v) must come after the crash (%v) and before the end (%v)", c.HandBackAt, c.CrashAt, c.Duration)
	case c.CrashAt >= c.Duration:
		return fmt.Errorf("sim: the scenario acts at %v, not before the end (duration %v)", c.CrashAt, c.Duration)
	case c.Duration > 24*time.Hour:
		return fmt.Errorf("sim: duration at most 24h, got %v", c.Duration)
	}
	if c.Auto != nil {
		if err := validateAuto(c); err != nil {
			return err
		}
	}
	return c.Params.Validate()
}
