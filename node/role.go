package node

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// This file is the pure core of --role auto: DecideRole is a function of
// the node's state, the directory, the previous decision state, the time
// and an injected random source. It does no I/O; role_run.go drives it
// and carries out what it decides.
//
// The rules (docs/ARCHITECTURE.md, "Roles"):
//
//   - An ordinary auto node promotes when all of these hold continuously
//     for a delay drawn once, when they start holding, uniformly from
//     [PromoteDelayMin, PromoteDelayMax]:
//     reachable (public reachability), up at least MinUptime, capacity at
//     least MinCapacity, and the network needs supernodes: the spare
//     capacity of the regular supernodes per attached client is below
//     SpareLow, or this node's home cluster is under-served (fewer than
//     cluster.Size members, or every member at HomeHighLoad or more while
//     the spare per client is below (SpareLow+SpareHigh)/2).
//     A criterion that stops holding cancels the wait; the next one draws
//     a new delay. N eligible nodes thus promote spread over the window,
//     and each promotion raises the spare capacity the others see, so
//     most of them stop waiting.
//   - A serving auto node demotes when it lost reachability (private)
//     for a delay drawn from the promotion window, or when the network
//     has a surplus for a delay drawn from [DemoteAfter, 2×DemoteAfter]:
//     spare per client above SpareHigh, and without this node's capacity
//     the spare per client would still be above SpareLow, at least
//     cluster.Size regular supernodes would remain, and its own home cluster
//     (without it) would not be under-served. So a node demotes only into
//     a state in which it would not promote again.
//
// SpareLow < SpareHigh and the "still above SpareLow without me" check are
// the hysteresis: a load oscillating around either mark does not make a
// node flap, and a promotion never by itself creates the surplus that
// would demote it.

// RoleAction is what DecideRole tells the driver to do.
type RoleAction int

// Actions.
const (
	RoleStay RoleAction = iota
	RolePromote
	RoleDemote
)

func (a RoleAction) String() string {
	switch a {
	case RolePromote:
		return "promote"
	case RoleDemote:
		return "demote"
	}
	return "stay"
}

// RolePolicy holds the thresholds of --role auto; see the rules above.
type RolePolicy struct {
	MinUptime   time.Duration
	MinCapacity int
	// SpareLow and SpareHigh are spare capacity per attached client:
	// promote below SpareLow, demote above SpareHigh (sustained).
	SpareLow, SpareHigh float64
	// HomeHighLoad is the load fraction (load/capacity) above which a
	// home cluster member counts as full.
	HomeHighLoad float64
	// ClusterSize is R, the size of a full home cluster.
	ClusterSize                      int
	PromoteDelayMin, PromoteDelayMax time.Duration
	// DemoteAfter is how long a surplus must last; the delay is drawn
	// from [DemoteAfter, 2×DemoteAfter].
	DemoteAfter time.Duration
}

// RoleEntry is one supernode of the directory as the decision sees it.
type RoleEntry struct {
	ID             peer.ID
	Mega           bool
	Capacity, Load int
}

// RoleInput is everything DecideRole looks at.
type RoleInput struct {
	Now          time.Time
	Serving      bool // the node is a supernode now
	Reachability network.Reachability
	Uptime       time.Duration
	Capacity     int // this node's configured capacity
	Self         peer.ID
	// Supernodes is the directory (self included while serving).
	Supernodes []RoleEntry
	// Home is this node's home cluster as an ordinary node, in ring
	// order: the first cluster.Size supernodes at hash(Self) other than
	// Self. For a serving node it is the home it would have once demoted.
	Home []peer.ID
}

// RoleCriterion is one rule and whether it holds now.
type RoleCriterion struct {
	Name   string
	Held   bool
	Detail string
}

// RoleDecision is the outcome of one evaluation.
type RoleDecision struct {
	Action   RoleAction
	Criteria []RoleCriterion
	// Reason says in one line why the node does what it does.
	Reason string
}

// RoleState is what DecideRole remembers between evaluations: the
// transition it is waiting for, since when its condition holds, and the
// delay drawn for it. The zero value waits for nothing.
type RoleState struct {
	Pending RoleAction
	Cause   string
	Since   time.Time
	Delay   time.Duration
}

// Criterion names, as status shows them.
const (
	CritReachable = "reachable"
	CritUptime    = "uptime"
	CritCapacity  = "capacity"
	CritNeeded    = "network needs supernodes"
	CritSurplus   = "network has surplus"
)

// spareFigures sums the directory: clients is the total load (every
// attached client, also those of mega-supernodes), spare the free
// capacity of the regular supernodes (megas are a temporary tier and
// hand their clients back, so their room is not counted).
func spareFigures(es []RoleEntry) (spare, clients, regular int) {
	for _, e := range es {
		clients += max(e.Load, 0)
		if e.Mega {
			continue
		}
		regular++
		spare += max(e.Capacity-e.Load, 0)
	}
	return spare, clients, regular
}

// perClient is spare capacity per client; with no client at all a
// network with spare capacity has an infinite surplus and one without
// any has none.
func perClient(spare, clients int) float64 {
	return float64(spare) / float64(max(clients, 1))
}

// homeUnderServed reports whether the home cluster has fewer than R
// members, or all of them are at HomeHighLoad or above while the spare
// capacity per client (ratio) is below the middle of the two marks.
//
// Why the second condition is gated: clients do not rebalance, so full
// members stay full while the rest of the network has room; the node's
// clients are then served by the failover path, and promoting this node
// would not unload them. Measured in TestAutoRolesNetwork without the
// gate: 5 promotions where the spare rule needed 3, the last ones at 0.67
// and 1.0 spare per client.
func homeUnderServed(p RolePolicy, in RoleInput, ratio float64) (bool, string) {
	byID := make(map[peer.ID]RoleEntry, len(in.Supernodes))
	for _, e := range in.Supernodes {
		byID[e.ID] = e
	}
	members, full := 0, 0
	for _, id := range in.Home {
		e, ok := byID[id]
		if !ok || e.Mega {
			continue
		}
		members++
		if e.Capacity <= 0 || float64(e.Load) >= p.HomeHighLoad*float64(e.Capacity) {
			full++
		}
	}
	mid := (p.SpareLow + p.SpareHigh) / 2
	switch {
	case members < p.ClusterSize:
		return true, fmt.Sprintf("home cluster has %d of %d members", members, p.ClusterSize)
	case full == members && ratio < mid:
		return true, fmt.Sprintf("all %d home cluster members at %.0f%% load or more, spare per client below %.3g", members, 100*p.HomeHighLoad, mid)
	case full == members:
		return false, fmt.Sprintf("all %d home cluster members at %.0f%% load or more, but spare per client at least %.3g", members, 100*p.HomeHighLoad, mid)
	}
	return false, fmt.Sprintf("home cluster %d/%d members, %d at %.0f%% load or more", members, p.ClusterSize, full, 100*p.HomeHighLoad)
}

// DecideRole evaluates the role rules once. It returns the decision and
// the state to pass to the next call; rng draws the randomised delays
// (one per started wait).
func DecideRole(p RolePolicy, in RoleInput, st RoleState, rng *rand.Rand) (RoleDecision, RoleState) {
	spare, clients, regular := spareFigures(in.Supernodes)
	ratio := perClient(spare, clients)

	reach := in.Reachability == network.ReachabilityPublic
	upOK := in.Uptime >= p.MinUptime
	capOK := in.Capacity >= p.MinCapacity && in.Capacity > 0
	crit := []RoleCriterion{
		{CritReachable, reach, "reachability " + strings.ToLower(in.Reachability.String())},
		{CritUptime, upOK, fmt.Sprintf("up %v, need %v", in.Uptime.Truncate(time.Second), p.MinUptime)},
		{CritCapacity, capOK, fmt.Sprintf("capacity %d, need %d", in.Capacity, p.MinCapacity)},
	}
	spareDetail := fmt.Sprintf("spare %d for %d clients (%.2f per client", spare, clients, ratio)

	var want RoleAction
	var cause string
	var lo, hi time.Duration
	if !in.Serving {
		under, homeDetail := homeUnderServed(p, in, ratio)
		need := ratio < p.SpareLow || under
		crit = append(crit, RoleCriterion{CritNeeded, need,
			fmt.Sprintf("%s, promote below %.2f); %s", spareDetail, p.SpareLow, homeDetail)})
		if reach && upOK && capOK && need {
			want, cause, lo, hi = RolePromote, "eligible and needed", p.PromoteDelayMin, p.PromoteDelayMax
		}
	} else {
		without := perClient(spare-in.Capacity, clients)
		under, homeDetail := homeUnderServed(p, in, without)
		surplus := ratio > p.SpareHigh && without > p.SpareLow && regular-1 >= p.ClusterSize && !under
		crit = append(crit, RoleCriterion{CritSurplus, surplus,
			fmt.Sprintf("%s, demote above %.2f); %.2f without this node (must stay above %.2f); %d regular supernodes (%d must remain); without this node: %s",
				spareDetail, p.SpareHigh, without, p.SpareLow, regular, p.ClusterSize, homeDetail)})
		switch {
		case in.Reachability == network.ReachabilityPrivate:
			want, cause, lo, hi = RoleDemote, "lost public reachability", p.PromoteDelayMin, p.PromoteDelayMax
		case surplus:
			want, cause, lo, hi = RoleDemote, "network has surplus", p.DemoteAfter, 2*p.DemoteAfter
		}
	}

	d := RoleDecision{Criteria: crit}
	if want == RoleStay {
		if in.Serving {
			d.Reason = "supernode: reachable and needed (no surplus)"
			if in.Reachability != network.ReachabilityPublic {
				d.Reason = "supernode: reachability " + strings.ToLower(in.Reachability.String()) + ", not lost"
			}
		} else {
			d.Reason = "ordinary: " + failing(crit)
		}
		return d, RoleState{}
	}
	if st.Pending != want || st.Cause != cause {
		st = RoleState{Pending: want, Cause: cause, Since: in.Now, Delay: drawDelay(rng, lo, hi)}
	}
	held := in.Now.Sub(st.Since)
	if held >= st.Delay {
		d.Action = want
		d.Reason = fmt.Sprintf("%s: %s for %v", want, cause, held.Truncate(time.Millisecond))
		return d, RoleState{}
	}
	now := "ordinary"
	if in.Serving {
		now = "supernode"
	}
	d.Reason = fmt.Sprintf("%s: %s; will %s after %v more if it keeps holding",
		now, cause, want, (st.Delay - held).Truncate(time.Millisecond))
	return d, st
}

// failing lists the criteria that do not hold.
func failing(cs []RoleCriterion) string {
	var out []string
	for _, c := range cs {
		if !c.Held {
			out = append(out, c.Name+" ("+c.Detail+")")
		}
	}
	if len(out) == 0 {
		return "all criteria hold"
	}
	return "not " + strings.Join(out, "; not ")
}

// drawDelay is uniform in [lo, hi].
func drawDelay(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
}
