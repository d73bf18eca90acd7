package cluster

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// Ring membership bounds. Together they keep ring.New from ever failing
// with "too many points", whatever the directory holds: a ring has at most
// (MaxTotalWeight + MaxMembers) × ring.DefaultPointsPerWeight points
// (scaling rounds each weight up to at least 1), 6.5 M of ring.MaxPoints'
// 67 M. The cost of building a ring at that bound is in
// BenchmarkMembersAtBound.
const (
	// MaxMembers is the most supernodes on the ring; the oldest (by
	// RampFrom, then ID) are kept.
	MaxMembers = 8192
	// MaxTotalWeight bounds the sum of ring weights. Above it every weight
	// is scaled down in proportion (at least 1 each): the ring keeps its
	// shape, and its cost stays bounded.
	MaxTotalWeight = 32768
)

// Ring weight ramp and subnet limit defaults.
const (
	// RampSteps is how many steps a new entry's ring weight takes from 1
	// to its full weight. Steps fall on a grid of RampPeriod/RampSteps
	// since the Unix epoch, the same on every node, so a node rebuilds its
	// ring for the ramp at most RampSteps times per RampPeriod however
	// many entries are ramping, and two nodes that first saw an entry in
	// the same grid cell give it the same weight.
	RampSteps = 4
	// RampIntervals is the default ramp period in announce intervals: 360,
	// an hour at the default 10 s.
	RampIntervals = 360
	// DefaultMaxPerSubnet is the most supernodes per IPv4 /24 or IPv6 /48
	// on the ring.
	DefaultMaxPerSubnet = 2
)

// Policy says which directory entries go on the ring and with what
// weight. Every node of one network must use the same Policy, or their
// rings differ.
type Policy struct {
	// RampPeriod: an entry's ring weight grows from 1 to its full weight
	// over RampPeriod after its RampFrom, in RampSteps steps. 0: no ramp.
	RampPeriod time.Duration
	// MaxPerSubnet: at most this many supernodes per IPv4 /24 or IPv6 /48
	// (of the entry's first public address, else its first address), the
	// oldest kept. 0: no limit.
	MaxPerSubnet int
	// LimitLocal applies MaxPerSubnet to loopback, private (RFC 1918, ULA)
	// and link-local addresses too. Off, entries whose first address is
	// such are not limited: an in-process testnet runs every supernode on
	// 127.0.0.1, a container testnet on one bridge subnet.
	LimitLocal bool
}

// DefaultPolicy is the policy of a node announcing every interval.
// localNet says the node itself has only loopback or private addresses
// (a testnet or a LAN): then local addresses are exempt from the subnet
// limit.
func DefaultPolicy(interval time.Duration, localNet bool) Policy {
	return Policy{RampPeriod: RampIntervals * interval, MaxPerSubnet: DefaultMaxPerSubnet, LimitLocal: !localNet}
}

// Members returns the regular supernodes of a snapshot as ring members,
// sorted by ID, under p at now: weights from the clamped capacity, ramped,
// at most p.MaxPerSubnet per subnet, at most MaxMembers, the total weight
// at most MaxTotalWeight (+ MaxMembers for rounding). Mega-supernodes are
// the fallback tier and are not on the cluster ring.
func Members(s *directory.Snapshot, now time.Time, p Policy) []ring.Member {
	type cand struct {
		e    directory.Entry
		cell int64 // ramp grid cell of RampFrom; -1 when established
	}
	cs := make([]cand, 0, s.Len())
	for _, e := range s.Entries {
		if e.Role != protocol.RoleSupernode {
			continue
		}
		cs = append(cs, cand{e: e, cell: rampCell(e.RampFrom, p.RampPeriod)})
	}
	// Oldest first: a newcomer cannot push an established supernode off
	// the ring by crowding its subnet or the member bound.
	slices.SortFunc(cs, func(a, b cand) int {
		return cmp.Or(cmp.Compare(a.cell, b.cell), strings.Compare(string(a.e.ID), string(b.e.ID)))
	})
	perSubnet := map[string]int{}
	ms := make([]ring.Member, 0, min(len(cs), MaxMembers))
	total := 0
	for _, c := range cs {
		if len(ms) == MaxMembers {
			break
		}
		if p.MaxPerSubnet > 0 {
			if key, limited := subnetOf(c.e.Addrs, p.LimitLocal); limited {
				if perSubnet[key] >= p.MaxPerSubnet {
					continue
				}
				perSubnet[key]++
			}
		}
		w := RampWeight(Weight(uint32(Capacity(c.e))), c.e.RampFrom, now, p.RampPeriod)
		total += w
		ms = append(ms, ring.Member{ID: c.e.ID.String(), Weight: w})
	}
	if total > MaxTotalWeight {
		for i := range ms {
			ms[i].Weight = max(1, ms[i].Weight*MaxTotalWeight/total)
		}
	}
	slices.SortFunc(ms, func(a, b ring.Member) int { return strings.Compare(a.ID, b.ID) })
	return ms
}

// RampWeight is full weight w ramped for an entry ramping from from
// (zero: established) at now over period: 1 + (w-1)·k/RampSteps, k the
// number of ramp grid lines (multiples of period/RampSteps since the Unix
// epoch) passed since from, at most RampSteps. So a new entry has weight 1
// until the next grid line, and its full weight after between
// period·(RampSteps-1)/RampSteps and period.
func RampWeight(w int, from, now time.Time, period time.Duration) int {
	if from.IsZero() || period < RampSteps || w <= 1 {
		return w
	}
	k := min(max(rampCell(now, period)-rampCell(from, period), 0), RampSteps)
	return 1 + (w-1)*int(k)/RampSteps
}

// NextRampStep returns when the next ramp step of any entry of s on the
// ring falls after now, or the zero time when none is ramping: the ring
// must be rebuilt then. All steps fall on the grid, so this is at most one
// rebuild per period/RampSteps.
func NextRampStep(s *directory.Snapshot, now time.Time, p Policy) time.Time {
	if p.RampPeriod < RampSteps {
		return time.Time{}
	}
	nowCell := rampCell(now, p.RampPeriod)
	for _, e := range s.Entries {
		if e.Role != protocol.RoleSupernode || e.RampFrom.IsZero() || Weight(uint32(Capacity(e))) <= 1 {
			continue
		}
		if nowCell-rampCell(e.RampFrom, p.RampPeriod) < RampSteps {
			tick := int64(p.RampPeriod / RampSteps)
			return time.Unix(0, (nowCell+1)*tick)
		}
	}
	return time.Time{}
}

// rampCell is the ramp grid cell of t, -1 for the zero time or no ramp.
func rampCell(t time.Time, period time.Duration) int64 {
	if t.IsZero() || period < RampSteps {
		return -1
	}
	return t.UnixNano() / int64(period/RampSteps)
}

// subnetOf returns the subnet an entry is counted in: the /24 (IPv4) or
// /48 (IPv6) of its first public address, else of its first address; a
// DNS address counts as its own name. limited is false when the subnet
// limit does not apply: the address is loopback, private or link-local and
// limitLocal is off.
// Subnet is the subnet the ring's per-subnet limit counts a supernode
// with these addresses in: the IPv4 /24 or IPv6 /48 of its first public
// address, else of its first address, else a DNS name; "" for none. A
// client's view cross-check asks a supernode of another subnet than its
// own supernode's.
func Subnet(addrs []ma.Multiaddr) string {
	key, _ := subnetOf(addrs, true)
	return key
}

func subnetOf(addrs []ma.Multiaddr, limitLocal bool) (key string, limited bool) {
	var first netip.Addr
	firstKey := ""
	for i, a := range addrs {
		ip, name := addrIP(a)
		if i == 0 {
			first, firstKey = ip, name
		}
		if ip.IsValid() && !isLocal(ip) {
			return prefixKey(ip), true
		}
	}
	switch {
	case first.IsValid():
		return prefixKey(first), limitLocal || !isLocal(first)
	case firstKey != "":
		return firstKey, true
	}
	return "", len(addrs) > 0
}

// addrIP returns the IP of a multiaddr's first component, or for a DNS
// address "dns:" and the name.
func addrIP(a ma.Multiaddr) (netip.Addr, string) {
	if len(a) == 0 {
		return netip.Addr{}, ""
	}
	c := a[0]
	switch c.Code() {
	case ma.P_IP4, ma.P_IP6:
		ip, ok := netip.AddrFromSlice(c.RawValue())
		if ok {
			return ip.Unmap(), ""
		}
	case ma.P_DNS, ma.P_DNS4, ma.P_DNS6, ma.P_DNSADDR:
		return netip.Addr{}, "dns:" + strings.ToLower(c.Value())
	}
	return netip.Addr{}, ""
}

func isLocal(ip netip.Addr) bool {
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsUnspecified()
}

func prefixKey(ip netip.Addr) string {
	bits := 24
	if ip.Is6() {
		bits = 48
	}
	p, _ := ip.Prefix(bits)
	return p.String()
}

// LocalOnly reports whether every address of addrs is loopback, private or
// link-local (a node on a testnet or a LAN); false for none.
func LocalOnly(addrs []ma.Multiaddr) bool {
	for _, a := range addrs {
		if ip, _ := addrIP(a); !ip.IsValid() || !isLocal(ip) {
			return false
		}
	}
	return len(addrs) > 0
}
