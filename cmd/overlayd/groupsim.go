package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/overlayd/overlayd/testnet/groupsim"
)

// errSeedsFailed: a seed of the group simulator broke the guarantee.
var errSeedsFailed = errors.New("seeds failed the no-loss check")

// runGroupSeeds runs `overlayd testnet sim --scenario groups`: --seeds
// seeds of the group data plane from --seed on, a progress line as they
// finish, and each failing seed's report (its failures and trace).
func runGroupSeeds(c *cli.Context) error {
	n, par := c.Int("seeds"), c.Int("parallel")
	switch {
	case n <= 0:
		return usageError{fmt.Errorf("--seeds must be >= 1, got %d", n)}
	case par < 0:
		return usageError{fmt.Errorf("--parallel must be >= 0, got %d", par)}
	}
	for _, f := range []string{"policy", "clients", "supernodes", "duration", "out"} {
		if c.IsSet(f) {
			return usageError{fmt.Errorf("--%s is not for --scenario groups", f)}
		}
	}
	w := c.App.Writer
	from := c.Uint64("seed")
	p := groupsim.DefaultParams()
	for _, kv := range c.StringSlice("fault") {
		kind, rate, err := parseFault(kv)
		if err != nil {
			return usageError{err}
		}
		p.Faults[kind] = rate
	}
	fmt.Fprintf(w, "groupsim: %d seeds from %d: %d supernodes, %d groups, %d members, %d publishers, %v of faults and traffic, %v quiet\n",
		n, from, p.Supernodes, p.Groups, p.Members, p.Publishers, p.Span, p.Quiet)
	start := time.Now()
	finished, failed, beyond := 0, 0, 0
	var failedSeeds []uint64
	faults := map[string]int{}
	acked, checked, told, lostBeyond := 0, 0, 0, 0
	groupsim.Seeds(from, n, par, p, func(r groupsim.Result) {
		finished++
		for k, v := range r.Faults {
			faults[k] += v
		}
		acked, checked, told, lostBeyond = acked+r.Acked, checked+r.Checked, told+r.Told, lostBeyond+r.LostBeyond
		if r.BeyondGuarantee {
			beyond++
		}
		if !r.OK {
			failed++
			failedSeeds = append(failedSeeds, r.Seed)
			fmt.Fprintf(w, "\nFAIL %s", r.Report())
		}
		if finished%100 == 0 || finished == n {
			fmt.Fprintf(w, "groupsim: %d/%d seeds, %d failed, %.1f seeds/s\n", finished, n, failed, float64(finished)/time.Since(start).Seconds())
		}
	})
	kinds := make([]string, 0, len(faults))
	for k, v := range faults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, v))
	}
	slices.Sort(kinds)
	fmt.Fprintf(w, "groupsim: %d seeds in %.1fs: %d acknowledged publishes, %d deliveries checked, %d members told of a gap; %d runs beyond the guarantee (%d lost there); faults injected: %s\n",
		n, time.Since(start).Seconds(), acked, checked, told, beyond, lostBeyond, strings.Join(kinds, ", "))
	if failed > 0 {
		slices.Sort(failedSeeds)
		fmt.Fprintf(w, "groupsim: %d of %d seeds failed: %v (replay one: overlayd testnet sim --scenario groups --seed S --seeds 1)\n", failed, n, failedSeeds)
		return fmt.Errorf("groupsim: %d of %d seeds: %w", failed, n, errSeedsFailed)
	}
	fmt.Fprintf(w, "groupsim: every seed passed\n")
	return nil
}

// parseFault reads a --fault KIND=RATE: a fault kind of the group
// simulator and the chance, in [0, 1], that a run has it.
func parseFault(kv string) (kind string, rate float64, err error) {
	kind, r, ok := strings.Cut(kv, "=")
	if !ok {
		return "", 0, fmt.Errorf("--fault %q: want KIND=RATE, such as partition=0.3", kv)
	}
	if !slices.Contains(groupsim.FaultKinds, kind) {
		return "", 0, fmt.Errorf("--fault %q: unknown kind %q (kinds: %s)", kv, kind, strings.Join(groupsim.FaultKinds, ", "))
	}
	rate, err = strconv.ParseFloat(r, 64)
	if err != nil || rate < 0 || rate > 1 {
		return "", 0, fmt.Errorf("--fault %q: the rate must be a number from 0 to 1", kv)
	}
	return kind, rate, nil
}
