package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

// sn is a regular supernode entry.
func sn(id peer.ID, capacity, load uint32, rampFrom time.Time, addrs ...string) directory.Entry {
	e := directory.Entry{Announcement: protocol.Announcement{ID: id, Role: protocol.RoleSupernode, Capacity: capacity, Load: load}, RampFrom: rampFrom}
	for _, a := range addrs {
		e.Addrs = append(e.Addrs, ma.StringCast(a))
	}
	return e
}

func TestCapacityAndSpareClamped(t *testing.T) {
	id := newID(t, 1)
	for _, tc := range []struct {
		name            string
		e               directory.Entry
		capacity, spare int
	}{
		{"honest", sn(id, 200, 50, time.Time{}), 200, 150},
		{"huge claim clamped", sn(id, 4_000_000_000, 0, time.Time{}), MaxCapacity, MaxCapacity},
		{"load above the clamp: no spare", sn(id, 4_000_000_000, MaxCapacity+1, time.Time{}), MaxCapacity, 0},
		{"verified mega exempt", func() directory.Entry {
			e := sn(id, 100_000, 0, time.Time{})
			e.Role, e.Cert = protocol.RoleMega, &protocol.MegaCert{}
			return e
		}(), 100_000, 100_000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if c, s := Capacity(tc.e), Spare(tc.e); c != tc.capacity || s != tc.spare {
				t.Fatalf("Capacity, Spare = %d, %d; want %d, %d", c, s, tc.capacity, tc.spare)
			}
		})
	}
}

func TestRampWeight(t *testing.T) {
	period := time.Hour
	tick := period / RampSteps
	from := t0.Add(tick / 2) // mid-cell
	for _, tc := range []struct {
		name string
		from time.Time
		at   time.Duration // after from
		w    int
		want int
	}{
		{"established", time.Time{}, 0, 64, 64},
		{"new: weight 1", from, 0, 64, 1},
		{"same grid cell: still 1", from, tick/2 - 1, 64, 1},
		{"first grid line: one step", from, tick / 2, 64, 1 + 63/4},
		{"two steps", from, tick/2 + tick, 64, 1 + 63*2/4},
		{"full after the period", from, period, 64, 64},
		{"long after", from, 10 * period, 64, 64},
		{"weight 1 never ramps", from, 0, 1, 1},
		{"clock went back: weight 1", from, -time.Hour, 64, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := tc.from
			if base.IsZero() {
				base = t0
			}
			if got := RampWeight(tc.w, tc.from, base.Add(tc.at), period); got != tc.want {
				t.Fatalf("RampWeight = %d, want %d", got, tc.want)
			}
		})
	}
	if got := RampWeight(64, from, from, 0); got != 64 {
		t.Fatalf("no ramp period: weight %d, want 64", got)
	}
}

func TestNextRampStep(t *testing.T) {
	p := Policy{RampPeriod: time.Hour}
	tick := time.Hour / RampSteps
	now := t0.Add(tick / 3)
	snap := &directory.Snapshot{Entries: []directory.Entry{
		sn(newID(t, 1), 6400, 0, time.Time{}),
		sn(newID(t, 2), 50, 0, now), // weight 1: nothing to ramp
	}}
	if got := NextRampStep(snap, now, p); !got.IsZero() {
		t.Fatalf("nothing ramps, next step %v", got)
	}
	snap.Entries = append(snap.Entries, sn(newID(t, 3), 6400, 0, now))
	if got, want := NextRampStep(snap, now, p), t0.Add(tick); !got.Equal(want) {
		t.Fatalf("next step %v, want the next grid line %v", got, want)
	}
	if got := NextRampStep(snap, now.Add(time.Hour), p); !got.IsZero() {
		t.Fatalf("ramp over, next step %v", got)
	}
}

func TestSubnetLimit(t *testing.T) {
	ids := make([]peer.ID, 6)
	for i := range ids {
		ids[i] = newID(t, uint64(100+i))
	}
	old, young := t0.Add(-24*time.Hour), t0
	limit := Policy{RampPeriod: time.Hour, MaxPerSubnet: 2, LimitLocal: true}
	lan := Policy{RampPeriod: time.Hour, MaxPerSubnet: 2}
	for _, tc := range []struct {
		name    string
		p       Policy
		entries []directory.Entry
		want    int
		keep    []peer.ID // must be on the ring
	}{
		{"three in one /24: the two oldest stay", limit, []directory.Entry{
			sn(ids[0], 100, 0, young, "/ip4/198.51.100.1/tcp/1"),
			sn(ids[1], 100, 0, old, "/ip4/198.51.100.2/tcp/1"),
			sn(ids[2], 100, 0, time.Time{}, "/ip4/198.51.100.3/tcp/1"),
		}, 2, []peer.ID{ids[1], ids[2]}},
		{"different /24s are not limited", limit, []directory.Entry{
			sn(ids[0], 100, 0, young, "/ip4/198.51.100.1/tcp/1"),
			sn(ids[1], 100, 0, young, "/ip4/198.51.101.1/tcp/1"),
			sn(ids[2], 100, 0, young, "/ip4/198.51.102.1/tcp/1"),
		}, 3, nil},
		{"IPv6: per /48", limit, []directory.Entry{
			sn(ids[0], 100, 0, old, "/ip6/2001:db8:1:1::1/tcp/1"),
			sn(ids[1], 100, 0, old, "/ip6/2001:db8:1:2::1/tcp/1"),
			sn(ids[2], 100, 0, young, "/ip6/2001:db8:1:3::1/tcp/1"),
			sn(ids[3], 100, 0, young, "/ip6/2001:db8:2::1/tcp/1"),
		}, 3, []peer.ID{ids[0], ids[1], ids[3]}},
		{"judged by the first public address", limit, []directory.Entry{
			sn(ids[0], 100, 0, old, "/ip4/127.0.0.1/tcp/1", "/ip4/198.51.100.1/tcp/1"),
			sn(ids[1], 100, 0, old, "/ip4/10.0.0.1/tcp/1", "/ip4/198.51.100.2/tcp/1"),
			sn(ids[2], 100, 0, young, "/ip4/198.51.100.3/tcp/1"),
		}, 2, []peer.ID{ids[0], ids[1]}},
		{"loopback exempt on a local network", lan, []directory.Entry{
			sn(ids[0], 100, 0, young, "/ip4/127.0.0.1/tcp/1"),
			sn(ids[1], 100, 0, young, "/ip4/127.0.0.1/tcp/2"),
			sn(ids[2], 100, 0, young, "/ip4/127.0.0.1/tcp/3"),
			sn(ids[3], 100, 0, young, "/ip4/192.168.1.4/tcp/3"),
		}, 4, nil},
		{"loopback limited on a public node", limit, []directory.Entry{
			sn(ids[0], 100, 0, young, "/ip4/127.0.0.1/tcp/1"),
			sn(ids[1], 100, 0, young, "/ip4/127.0.0.1/tcp/2"),
			sn(ids[2], 100, 0, young, "/ip4/127.0.0.1/tcp/3"),
		}, 2, nil},
		{"DNS names count by name", limit, []directory.Entry{
			sn(ids[0], 100, 0, young, "/dns4/a.example/tcp/1"),
			sn(ids[1], 100, 0, young, "/dns4/A.example/tcp/2"),
			sn(ids[2], 100, 0, young, "/dns4/a.example/tcp/3"),
			sn(ids[3], 100, 0, young, "/dns4/b.example/tcp/3"),
		}, 3, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := Members(&directory.Snapshot{Entries: tc.entries}, t0, tc.p)
			if len(ms) != tc.want {
				t.Fatalf("%d members %v, want %d", len(ms), ms, tc.want)
			}
			for _, id := range tc.keep {
				found := false
				for _, m := range ms {
					found = found || m.ID == id.String()
				}
				if !found {
					t.Fatalf("%s was pushed off the ring by a newer entry", id.ShortString())
				}
			}
		})
	}
}

// TestMembersNeverTooManyPoints: the bounds hold by construction, and a
// directory full of maximum-capacity entries (65,536, its bound) still
// gives a ring instead of "too many points".
func TestMembersNeverTooManyPoints(t *testing.T) {
	if (MaxTotalWeight+MaxMembers)*ring.DefaultPointsPerWeight > ring.MaxPoints || MaxMembers > ring.MaxMembers {
		t.Fatalf("bounds allow %d points, ring.MaxPoints is %d", (MaxTotalWeight+MaxMembers)*ring.DefaultPointsPerWeight, ring.MaxPoints)
	}
	snap := atBound(t, directory.DefaultMaxEntries)
	ms := Members(snap, t0, Policy{})
	total := 0
	for _, m := range ms {
		total += m.Weight
	}
	if len(ms) != MaxMembers || total > MaxTotalWeight+MaxMembers {
		t.Fatalf("%d members of total weight %d, want %d and at most %d", len(ms), total, MaxMembers, MaxTotalWeight+MaxMembers)
	}
	if testing.Short() {
		return
	}
	if _, err := ring.New(ms); err != nil {
		t.Fatalf("ring at the bound: %v", err)
	}
}

// atBound is a snapshot of n regular supernodes of the largest capacity.
func atBound(tb testing.TB, n int) *directory.Snapshot {
	tb.Helper()
	es := make([]directory.Entry, n)
	for i := range es {
		// Identity multihash IDs: cheap, distinct, valid.
		id := peer.ID(fmt.Sprintf("\x00\x08id%06d", i))
		es[i] = sn(id, 4_000_000_000, 0, time.Time{}, fmt.Sprintf("/ip4/10.%d.%d.1/tcp/1", i>>8, i&255))
	}
	return &directory.Snapshot{Entries: es}
}

// BenchmarkMembersAtBound is the cost of one ring rebuild with the
// directory at its bound: Members plus ring.New.
func BenchmarkMembersAtBound(b *testing.B) {
	snap := atBound(b, directory.DefaultMaxEntries)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ring.New(Members(snap, t0, Policy{})); err != nil {
			b.Fatal(err)
		}
	}
}

// TestSybilRingShare is the ring half of the Sybil attack: 3 honest
// supernodes of capacity 200, established, and 8 or 64 made-up ones of
// capacity 4,000,000,000 that arrived just now. Policy{} is the rule before
// the ramp and the subnet limit (capacity was already capped by Weight).
func TestSybilRingShare(t *testing.T) {
	honest := []directory.Entry{
		sn(newID(t, 1), 200, 0, time.Time{}, "/ip4/203.0.113.1/tcp/4001"),
		sn(newID(t, 2), 200, 0, time.Time{}, "/ip4/198.18.7.1/tcp/4001"),
		sn(newID(t, 3), 200, 0, time.Time{}, "/ip4/100.1.2.3/tcp/4001"),
	}
	p := DefaultPolicy(10*time.Second, false)
	for _, tc := range []struct {
		name     string
		fakes    int
		spread   bool // one /24 per fake, rather than all in one
		p        Policy
		at       time.Duration // after the fakes arrived
		min, max float64       // honest share
	}{
		{"before: 8 fakes, no ramp, no subnet limit", 8, false, Policy{}, 0, 0, 0.02},
		{"8 fakes in one /24", 8, false, p, 0, 0.74, 1},
		{"64 fakes in one /24", 64, false, p, 0, 0.74, 1},
		{"64 fakes in one /24, ramp done", 64, false, p, p.RampPeriod, 0.04, 1},
		{"8 fakes in 8 /24s, ramping", 8, true, p, 0, 0.4, 1},
		{"64 fakes in 64 /24s, ramping", 64, true, p, 0, 0.08, 1},
		{"64 fakes in 64 /24s, ramp done", 64, true, p, p.RampPeriod, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			es := append([]directory.Entry{}, honest...)
			for i := range tc.fakes {
				addr := fmt.Sprintf("/ip4/192.0.2.%d/tcp/1", i+1)
				if tc.spread {
					addr = fmt.Sprintf("/ip4/192.0.%d.1/tcp/1", 10+i)
				}
				es = append(es, sn(newID(t, uint64(1000+i)), 4_000_000_000, 0, t0, addr))
			}
			r, err := ring.New(Members(&directory.Snapshot{Entries: es}, t0.Add(tc.at), tc.p))
			if err != nil {
				t.Fatal(err)
			}
			share := 0.0
			for _, s := range r.Stats().Shares {
				for _, h := range honest {
					if s.ID == h.ID.String() {
						share += s.Share
					}
				}
			}
			t.Logf("honest share of the ring: %.1f%%", 100*share)
			if share < tc.min || share > tc.max {
				t.Fatalf("honest share %.3f, want within [%.2f, %.2f]", share, tc.min, tc.max)
			}
		})
	}
}
