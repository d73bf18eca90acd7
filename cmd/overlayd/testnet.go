package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/testnet"
)

func testnetCommand() *cli.Command {
	d := testnet.DefaultConfig()
	var names []string
	for _, s := range testnet.Scenarios() {
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
				&cli.StringFlag{Name: "scenario", Usage: "scenario to run: " + strings.Join(testnet.ScenarioNames(), ", "), Value: "tour"},
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
				if _, err := testnet.FindScenario(c.String("scenario")); err != nil {
					return usageError{fmt.Errorf("--scenario: %w", err)}
				}
				ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
				defer stop()
				ctx, cancel := context.WithTimeout(ctx, c.Duration("timeout"))
				defer cancel()
				return runScenario(ctx, c.App.Writer, testnet.RunConfig{Config: cfg, Scenario: c.String("scenario"), Version: node.BuildVersion().Version},
					c.String("report"), isTerminal(c.App.Writer))
			},
		}},
	}
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
func runScenario(ctx context.Context, w io.Writer, rc testnet.RunConfig, reportDir string, tty bool) error {
	fmt.Fprintf(w, "testnet: scenario %s, seed %d: %d supernodes (capacity %d), %d mega-supernodes (certificate capacity %d), %d ordinary nodes on 127.0.0.1\n",
		rc.Scenario, rc.Seed, rc.Supernodes, rc.Capacity, rc.Megas, rc.MegaCapacity, rc.Clients)
	p := &progressView{w: w, tty: tty}
	rc.Progress = p.show
	rep, err := testnet.RunScenario(ctx, rc)
	p.done()
	if rep == nil {
		return err
	}
	writeSummary(w, rep)
	if reportDir != "" {
		files, werr := testnet.WriteReport(rep, reportDir)
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

func (p *progressView) show(pr testnet.Progress) {
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
func writeSummary(w io.Writer, rep *testnet.Report) {
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
