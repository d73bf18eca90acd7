package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node/version"
	"github.com/overlayd/overlayd/testnet"
	"github.com/overlayd/overlayd/testnet/dircost"
	"github.com/overlayd/overlayd/testnet/groupsim"
	"github.com/overlayd/overlayd/testnet/planner"
	"github.com/overlayd/overlayd/testnet/report"
	"github.com/overlayd/overlayd/testnet/scenario"
	"github.com/overlayd/overlayd/testnet/sim"
)

func testnetCommand() *cli.Command {
	d := testnet.DefaultConfig()
	var names []string
	for _, s := range scenario.All() {
		names = append(names, fmt.Sprintf("  %-10s %s", s.Name, s.Summary))
	}
	return &cli.Command{
		Name:  "testnet",
		Usage: "local test networks",
		Subcommands: []*cli.Command{{
			Name:  "run",
			Usage: "run a scenario on an in-process network on 127.0.0.1 and check its pass criteria",
			Description: "Starts supernodes, mega-supernodes and ordinary nodes as real libp2p hosts in this\n" +
				"process, runs a scenario on them and checks its pass criteria; exits 1 if one fails.\n" +
				"The same --seed gives the same identities and the same schedule.\n\nScenarios:\n" +
				strings.Join(names, "\n"),
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "scenario", Usage: "scenario to run: " + strings.Join(scenario.Names(), ", "), Value: "tour"},
				&cli.IntFlag{Name: "supernodes", Usage: "regular supernodes to start", Value: d.Supernodes},
				&cli.IntFlag{Name: "clients", Usage: "ordinary nodes to start", Value: d.Clients},
				&cli.IntFlag{Name: "megas", Usage: "operator-seeded mega-supernodes to start", Value: d.Megas},
				&cli.IntFlag{Name: "capacity", Usage: "capacity of each supernode", Value: d.Capacity},
				&cli.IntFlag{Name: "mega-capacity", Usage: "capacity in the mega-supernodes' certificates", Value: d.MegaCapacity},
				&cli.DurationFlag{Name: "interval", Usage: "announce interval", Value: d.AnnounceInterval},
				&cli.DurationFlag{Name: "keepalive", Usage: "session keepalive interval", Value: d.Keepalive},
				&cli.Uint64Flag{Name: "seed", Usage: "seed of the network's identities and random choices", Value: d.Seed},
				&cli.StringFlag{Name: "report", Usage: "write report.json, plots and report.md into this directory"},
				&cli.BoolFlag{Name: "no-jitter", Usage: "give the clients the naive retry policy (fixed intervals, no stagger)"},
				&cli.BoolFlag{Name: "no-resume", Usage: "for comparison: supernodes without their store (no group resume, no home replication)"},
				&cli.DurationFlag{Name: "timeout", Usage: "give up after this long", Value: 5 * time.Minute},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return usageError{fmt.Errorf("testnet run: unexpected argument %q", c.Args().First())}
				}
				cfg := d
				cfg.Supernodes = c.Int("supernodes")
				cfg.Clients = c.Int("clients")
				cfg.Megas = c.Int("megas")
				cfg.Capacity = c.Int("capacity")
				cfg.MegaCapacity = c.Int("mega-capacity")
				cfg.AnnounceInterval = c.Duration("interval")
				cfg.Keepalive = c.Duration("keepalive")
				cfg.Seed = c.Uint64("seed")
				cfg.NoJitter = c.Bool("no-jitter")
				cfg.NoResume = c.Bool("no-resume")
				if err := cfg.Validate(); err != nil {
					return usageError{err}
				}
				if _, err := scenario.Find(c.String("scenario")); err != nil {
					return usageError{fmt.Errorf("--scenario: %w", err)}
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
				defer cancel()
				return runScenario(ctx, c.App.Writer, scenario.RunConfig{Config: cfg, Scenario: c.String("scenario"), Version: version.Build().Version},
					c.String("report"), isTerminal(c.App.Writer))
			},
		}, simCommand()},
	}
}

// simCommand is `overlayd testnet sim`: the discrete-event simulator.
func simCommand() *cli.Command {
	var names []string
	for _, s := range sim.Scenarios() {
		names = append(names, fmt.Sprintf("  %-10s %s", s.Name, s.Summary))
	}
	return &cli.Command{
		Name:  "sim",
		Usage: "simulate a scenario at scale with the daemon's own decision code (virtual time, one thread)",
		Description: "Runs a scenario in a deterministic discrete-event simulation: the ring, directory, home\n" +
			"clusters, failover plan, backoff and capacity semaphores are overlayd's code; the network\n" +
			"and the supernodes' CPU are modelled (testnet/sim.Params). The same --seed gives a\n" +
			"byte-identical report.json.\n\nScenarios:\n" + strings.Join(names, "\n") +
			"\n  groups: the group data plane (testnet/groupsim): every supernode runs the real group core\n" +
			"          over simulated links with crashes, ring flaps, duplicated frames and failing store\n" +
			"          writes; each of --seeds runs is checked against the no-loss guarantee, and a failing\n" +
			"          seed is printed with its trace (replay one with --seed S --seeds 1)" +
			"\n\nPolicies: " + strings.Join(sim.PolicyNames(), ", "),
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "scenario", Usage: "scenario: " + strings.Join(sim.ScenarioNames(), ", "), Value: "skype2010"},
			&cli.StringFlag{Name: "policy", Usage: "policy: " + strings.Join(sim.PolicyNames(), ", ") + ", or all (each in turn, compared side by side in --out)", Value: "overlayd"},
			&cli.IntFlag{Name: "clients", Usage: "ordinary nodes (0: the scenario's)"},
			&cli.IntFlag{Name: "supernodes", Usage: "regular supernodes (0: the scenario's)"},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of the identities and every random choice", Value: 1},
			&cli.DurationFlag{Name: "duration", Usage: "simulated time (0: the scenario's)"},
			&cli.StringFlag{Name: "out", Usage: "write report.json, report.md and the plots into this directory"},
			&cli.IntFlag{Name: "seeds", Usage: "--scenario groups: how many seeds to run, from --seed on", Value: 1},
			&cli.IntFlag{Name: "parallel", Usage: "--scenario groups: seeds run at once (0: one per CPU)"},
			&cli.StringSliceFlag{Name: "fault", Usage: "--scenario groups: KIND=RATE, the chance a run has that kind of fault (repeatable; kinds: " + strings.Join(groupsim.FaultKinds, ", ") + ")"},
		},
		Subcommands: []*cli.Command{planCommand(), dirCostCommand()},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError{fmt.Errorf("testnet sim: unexpected argument %q", c.Args().First())}
			}
			if c.String("scenario") == "groups" {
				return runGroupSeeds(c)
			}
			for _, f := range []string{"seeds", "parallel", "fault"} {
				if c.IsSet(f) {
					return usageError{fmt.Errorf("--%s is for --scenario groups", f)}
				}
			}
			pols := sim.Policies()
			if name := c.String("policy"); name != "all" {
				pol, err := sim.FindPolicy(name)
				if err != nil {
					return usageError{fmt.Errorf("--policy: %w (or all)", err)}
				}
				pols = []sim.Policy{pol}
			}
			for _, f := range []string{"clients", "supernodes"} {
				if c.Int(f) < 0 {
					return usageError{fmt.Errorf("--%s must be >= 0, got %d", f, c.Int(f))}
				}
			}
			if c.Duration("duration") < 0 {
				return usageError{fmt.Errorf("--duration must be >= 0, got %v", c.Duration("duration"))}
			}
			var reps []*sim.Report
			for _, pol := range pols {
				cfg, err := sim.NewConfig(c.String("scenario"), pol, c.Int("clients"), c.Int("supernodes"), c.Uint64("seed"))
				if err == nil && c.Duration("duration") > 0 {
					cfg.Duration = c.Duration("duration")
					err = cfg.Validate()
				}
				if err != nil {
					return usageError{err}
				}
				out := c.String("out")
				if out != "" && len(pols) > 1 {
					out = filepath.Join(out, pol.Name)
				}
				rep, err := runSim(c.App.Writer, c.App.ErrWriter, cfg, out)
				if err != nil {
					return err
				}
				reps = append(reps, rep)
			}
			if len(reps) > 1 && c.String("out") != "" {
				files, err := sim.WriteComparison(reps, c.String("out"))
				if err != nil {
					return err
				}
				fmt.Fprintf(c.App.Writer, "comparison: %s\n", strings.Join(files, ", "))
			}
			return nil
		},
	}
}

// dirCostCommand is `overlayd testnet sim dircost`: the directory's cost
// per node, today's design (every node hears the topic) against the two
// tiers (ordinary nodes keep a view).
func dirCostCommand() *cli.Command {
	return &cli.Command{
		Name:  "dircost",
		Usage: "the directory's traffic and signature checks per ordinary node and per supernode, by tier size",
		Description: "Simulates the supernodes' announcements (on the daemon's schedule, through GossipSub) and the\n" +
			"ordinary nodes' view refreshes and cross-checks (real signed messages, real views), and prints\n" +
			"per node and per second the bytes received and the signature checks, for every node hearing the\n" +
			"topic (today) and for the two tiers (view). The model and its assumptions: testnet/dircost.\n\n" +
			"Example: overlayd testnet sim dircost --supernodes 100,1000,10000,100000",
		Flags: []cli.Flag{
			&cli.IntSliceFlag{Name: "supernodes", Usage: "tier sizes, repeatable or comma-separated", Value: cli.NewIntSlice(100, 1_000, 10_000, 100_000)},
			&cli.DurationFlag{Name: "interval", Usage: "the configured announce interval", Value: dircost.DefaultParams().Base},
			&cli.Uint64Flag{Name: "seed", Usage: "seed of every random choice", Value: 1},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError{fmt.Errorf("testnet sim dircost: unexpected argument %q", c.Args().First())}
			}
			sizes := c.IntSlice("supernodes")
			for _, n := range sizes {
				if n < 1 || n > 1_000_000 {
					return usageError{fmt.Errorf("--supernodes: %d is not in [1, 1000000]", n)}
				}
			}
			p := dircost.DefaultParams()
			p.Base, p.Seed = c.Duration("interval"), c.Uint64("seed")
			rows, err := dircost.Compute(sizes, p)
			if err != nil {
				return usageError{err}
			}
			fmt.Fprint(c.App.Writer, dircost.Markdown(rows))
			fmt.Fprintln(c.App.Writer)
			fmt.Fprint(c.App.Writer, dircost.RefreshMarkdown(rows))
			return nil
		},
	}
}

// planCommand is `overlayd testnet sim plan`: the capacity planner.
func planCommand() *cli.Command {
	return &cli.Command{
		Name:  "plan",
		Usage: "size the mega-supernodes (or the supernode headroom) a network needs to survive an outage",
		Description: "Searches, by simulating the outage (the skype2010 scenario on your network, policy overlayd,\n" +
			"the model's default parameters), for the fewest mega-supernodes of each size, and separately\n" +
			"for the capacity per supernode or the number of supernodes without megas, that attach the\n" +
			"target fraction of the clients within the target time after --loss of the supernodes crash\n" +
			"at once. Every candidate runs with --seeds seeds and the worst counts; each answer is printed\n" +
			"with the candidate just below it. Run it before an outage, not during one.\n\n" +
			"Example: overlayd testnet sim plan --clients 100000 --supernodes 1000 --capacity 112 --loss 0.3 --target 99%/60s",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "clients", Usage: "ordinary nodes in the network (required)"},
			&cli.IntFlag{Name: "supernodes", Usage: "regular supernodes in the network (required)"},
			&cli.IntFlag{Name: "capacity", Usage: "capacity of each supernode, in attached clients (required)"},
			&cli.Float64Flag{Name: "loss", Usage: "fraction of the supernodes that crash at once, in [0, 1)", Value: 0.3},
			&cli.StringFlag{Name: "target", Usage: "fraction attached / time after the crash, e.g. 99%/60s or 0.995/2m", Value: "99%/60s"},
			&cli.IntSliceFlag{Name: "mega-capacity", Usage: "mega sizes to plan for, repeatable or comma-separated (default: 5, 10 and 20 × --capacity)"},
			&cli.Uint64Flag{Name: "seed", Usage: "first seed; the seeds are --seed, --seed+1, ...", Value: 1},
			&cli.IntFlag{Name: "seeds", Usage: "seeds per candidate (the worst counts)", Value: 3},
			&cli.IntFlag{Name: "parallel", Usage: "simulations to run at once (default: GOMAXPROCS); the plan is the same", Value: runtime.GOMAXPROCS(0)},
			&cli.StringFlag{Name: "max-memory", Usage: "memory the simulations running at once may take, e.g. 8GiB or 512MiB; fewer run at once if they would not fit", Value: "4GiB"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 0 {
				return usageError{fmt.Errorf("testnet sim plan: unexpected argument %q", c.Args().First())}
			}
			for _, f := range []string{"clients", "supernodes", "capacity"} {
				if !c.IsSet(f) {
					return usageError{fmt.Errorf("testnet sim plan: --%s is required", f)}
				}
			}
			frac, within, err := parseTarget(c.String("target"))
			if err != nil {
				return usageError{fmt.Errorf("--target: %w", err)}
			}
			n := c.Int("seeds")
			if n < 1 || n > 100 {
				return usageError{fmt.Errorf("--seeds must be in [1, 100], got %d", n)}
			}
			in := planner.Input{Clients: c.Int("clients"), Supernodes: c.Int("supernodes"), Capacity: c.Int("capacity"),
				Loss: c.Float64("loss"), Fraction: frac, Within: within, MegaCapacities: c.IntSlice("mega-capacity")}
			for i := range n {
				in.Seeds = append(in.Seeds, c.Uint64("seed")+uint64(i))
			}
			if err := in.Validate(); err != nil {
				return usageError{err}
			}
			maxMem, err := parseBytes(c.String("max-memory"))
			if err != nil {
				return usageError{fmt.Errorf("--max-memory: %w", err)}
			}
			want := c.Int("parallel")
			if want < 1 {
				return usageError{fmt.Errorf("--parallel must be >= 1, got %d", want)}
			}
			if in.Parallel, err = in.Workers(want, maxMem); err != nil {
				return fmt.Errorf("%w: raise --max-memory", err)
			}
			if in.Parallel < want {
				fmt.Fprintf(c.App.ErrWriter, "plan: %d simulation(s) at once, not %d: each takes about %s and --max-memory is %s\n",
					in.Parallel, want, planner.Bytes(in.Memory()), planner.Bytes(maxMem))
			}
			return runPlan(c.App.Writer, c.App.ErrWriter, in)
		},
	}
}

// parseTarget reads "99%/60s" (or "0.99/60s"): a fraction in (0, 1] and a
// positive duration.
func parseTarget(s string) (float64, time.Duration, error) {
	f, d, ok := strings.Cut(s, "/")
	if !ok {
		return 0, 0, fmt.Errorf("want fraction/time, e.g. 99%%/60s, got %q", s)
	}
	scale := 1.0
	if p, found := strings.CutSuffix(strings.TrimSpace(f), "%"); found {
		f, scale = p, 100
	}
	frac, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
	if err != nil {
		return 0, 0, fmt.Errorf("fraction %q: want e.g. 99%% or 0.99", f)
	}
	frac /= scale
	if !(frac > 0 && frac <= 1) {
		return 0, 0, fmt.Errorf("fraction must be in (0, 100%%], got %q", s)
	}
	within, err := time.ParseDuration(strings.TrimSpace(d))
	if err != nil || within <= 0 {
		return 0, 0, fmt.Errorf("time %q: want a positive duration, e.g. 60s", d)
	}
	return frac, within, nil
}

// parseBytes reads a size: a number of bytes with an optional unit, KiB,
// MiB, GiB or TiB (powers of 1024), or KB, MB, GB or TB (of 1000).
func parseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	scale := 1.0
	for _, u := range []struct {
		suffix string
		scale  float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1}} {
		if v, ok := strings.CutSuffix(t, u.suffix); ok {
			t, scale = strings.TrimSpace(v), u.scale
			break
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || !(f > 0) || f*scale >= 1<<62 {
		return 0, fmt.Errorf("want a positive size, e.g. 8GiB or 512MiB, got %q", s)
	}
	return int64(f * scale), nil
}

// runPlan searches and prints the plan, with a progress line on errw when
// it is a terminal.
func runPlan(w, errw io.Writer, in planner.Input) error {
	start := time.Now()
	runs := 0
	if isTerminal(errw) {
		in.Progress = func(cfg sim.Config, t *float64) {
			runs++
			fmt.Fprintf(errw, "\r\033[Ksimulation %d: %d supernodes of %d, %d megas of %d, seed %d  (%v)",
				runs, cfg.Supernodes, cfg.Capacity, cfg.Megas, cfg.MegaCapacity, cfg.Seed, time.Since(start).Round(time.Second))
		}
	}
	pl, err := planner.Search(in)
	if in.Progress != nil {
		fmt.Fprint(errw, "\r\033[K")
	}
	if err != nil {
		return err
	}
	fmt.Fprint(w, pl.Text())
	fmt.Fprintf(w, "wall time %v\n", time.Since(start).Round(time.Millisecond))
	return nil
}

// runSim runs one simulation, with a progress line on errw when it is a
// terminal, prints the summary on w, and returns the report.
func runSim(w, errw io.Writer, cfg sim.Config, out string) (*sim.Report, error) {
	fmt.Fprintf(w, "sim: scenario %s, policy %s, seed %d: %d supernodes (capacity %d), %d megas (%d), %d clients, %v simulated\n",
		cfg.Scenario, cfg.Policy.Name, cfg.Seed, cfg.Supernodes, cfg.Capacity, cfg.Megas, cfg.MegaCapacity, cfg.Clients, cfg.Duration)
	start := time.Now()
	s, err := sim.New(cfg)
	if err != nil {
		return nil, err
	}
	setup := time.Since(start)
	if isTerminal(errw) {
		s.Progress = func(p sim.Progress) {
			el := time.Since(start)
			eta := time.Duration(float64(el) * float64(p.Duration-p.Sim) / float64(max(p.Sim, 1)))
			fmt.Fprintf(errw, "\r\033[K%7.1fs of %.0fs simulated  attached %d/%d  supernodes %d  %d events  %.2fM events/s  ETA %v",
				p.Sim.Seconds(), p.Duration.Seconds(), p.Attached, p.Clients, p.Alive, p.Events,
				float64(p.Events)/el.Seconds()/1e6, eta.Round(time.Second))
		}
	}
	rep := s.Run()
	wall := time.Since(start)
	if s.Progress != nil {
		fmt.Fprintln(errw)
	}
	sum := rep.Summary
	secs := func(p *float64) string {
		if p == nil {
			return "never"
		}
		return fmt.Sprintf("%.1fs", *p)
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "orphans\t%d\n", sum.Orphans)
	fmt.Fprintf(tw, "time to 99%% / 100%% attached\t%s / %s\n", secs(sum.TimeTo99), secs(sum.TimeTo100))
	fmt.Fprintf(tw, "attached: lowest / final\t%.4f / %.4f\n", sum.LowestAttached, sum.FinalAttached)
	fmt.Fprintf(tw, "supernodes crashed / failed by overload\t%d / %d\n", sum.SupernodesCrashed, sum.SupernodesFailed)
	fmt.Fprintf(tw, "regular supernodes alive: fewest / end\t%.2f / %.2f\n", sum.RegularAliveMin, sum.RegularAliveEnd)
	fmt.Fprintf(tw, "peak load / capacity; supernodes above capacity\t%.2f; %d\n", sum.PeakLoad, sum.AboveCapacity)
	fmt.Fprintf(tw, "megas: peak clients\t%d\n", sum.MegaPeak)
	if a := sum.Auto; a != nil {
		fmt.Fprintf(tw, "auto: promotions / demotions; formed (99%% attached)\t%d / %d; %s\n", a.Promotions, a.Demotions, secs(a.FormedAt))
		fmt.Fprintf(tw, "auto supernodes: at the crash / crashed / most / end\t%d / %d / %d / %d\n", a.ServingAtCrash, a.Crashed, a.ServingPeak, a.ServingEnd)
	}
	fmt.Fprintf(tw, "attempts: accept / busy / error; peak per 100 ms\t%d / %d / %d; %d\n", sum.Attempts.Accept, sum.Attempts.Busy, sum.Attempts.Error, sum.PeakAttempts100)
	fmt.Fprintf(tw, "events; wall time (setup); events/s\t%d; %v (%v); %.0f\n", sum.Events, wall.Round(time.Millisecond), setup.Round(time.Millisecond), float64(sum.Events)/(wall-setup).Seconds())
	tw.Flush()
	if out != "" {
		files, err := rep.Write(out)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(w, "report: %s\n", strings.Join(files, ", "))
	}
	return rep, nil
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// errCriteria is returned when a run ends with a failed pass criterion.
var errCriteria = errors.New("a pass criterion failed")

// runScenario runs one scenario, showing progress on w (a status line on a
// terminal, log lines otherwise), and prints the summary.
func runScenario(ctx context.Context, w io.Writer, rc scenario.RunConfig, reportDir string, tty bool) error {
	fmt.Fprintf(w, "testnet: scenario %s, seed %d: %d supernodes (capacity %d), %d mega-supernodes (certificate capacity %d), %d ordinary nodes on 127.0.0.1\n",
		rc.Scenario, rc.Seed, rc.Supernodes, rc.Capacity, rc.Megas, rc.MegaCapacity, rc.Clients)
	p := &progressView{w: w, tty: tty}
	rc.Progress = p.show
	rep, err := scenario.Run(ctx, rc)
	p.done()
	if rep == nil {
		return err
	}
	writeSummary(w, rep)
	if reportDir != "" {
		files, werr := report.Write(rep, reportDir)
		if werr != nil {
			return errors.Join(err, werr)
		}
		fmt.Fprintf(w, "report: %s\n", strings.Join(files, ", "))
	}
	if err != nil {
		return err
	}
	if !rep.Passed {
		return fmt.Errorf("scenario %s (seed %d): %w", rep.Scenario, rep.Seed, errCriteria)
	}
	return nil
}

// progressView shows the run's progress: on a terminal one status line,
// rewritten in place, with events printed above it; otherwise a log line
// per event and one every few seconds.
type progressView struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	last time.Time
	line bool
	// phase is the last phase shown, so a new one gets its own log line.
	phase string
}

func (p *progressView) show(pr scenario.Progress) {
	p.mu.Lock()
	defer p.mu.Unlock()
	status := fmt.Sprintf("%6.1fs  %-26s attached %d/%d  supernodes %d  delivered %d  refusals %d",
		pr.T, pr.Phase, pr.Attached, pr.Clients, pr.Supernodes, pr.Delivered, pr.Refusals)
	if p.tty {
		if pr.Event != nil || pr.Phase != p.phase {
			p.clear()
			if pr.Event != nil {
				fmt.Fprintf(p.w, "%6.1fs  %s %s\n", pr.Event.T, pr.Event.Kind, pr.Event.Detail)
			}
		}
		p.phase = pr.Phase
		fmt.Fprintf(p.w, "\r\033[K%s", status)
		p.line = true
		return
	}
	switch {
	case pr.Event != nil:
		fmt.Fprintf(p.w, "%6.1fs  %s %s\n", pr.Event.T, pr.Event.Kind, pr.Event.Detail)
	case pr.Phase != p.phase || time.Since(p.last) >= 2*time.Second:
		fmt.Fprintln(p.w, status)
		p.phase, p.last = pr.Phase, time.Now()
	}
}

func (p *progressView) clear() {
	if p.line {
		fmt.Fprint(p.w, "\r\033[K")
		p.line = false
	}
}

func (p *progressView) done() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty && p.line {
		fmt.Fprintln(p.w)
		p.line = false
	}
}

// writeSummary prints the criteria and figures of a report.
func writeSummary(w io.Writer, rep *report.Report) {
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "RESULT\tCRITERION\tWANT\tGOT")
	for _, c := range rep.Criteria {
		res := "PASS"
		if !c.Pass {
			res = "FAIL"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", res, c.Name, c.Want, c.Got)
	}
	tw.Flush()
	verdict := "PASSED"
	if !rep.Passed {
		verdict = "FAILED"
	}
	fmt.Fprintf(w, "\nscenario %s %s in %.1fs (seed %d; rerun with --seed %d for the same schedule)\n",
		rep.Scenario, verdict, rep.DurationSeconds, rep.Seed, rep.Seed)
}
