package ring_test

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/overlayd/overlayd/overlay/ring"
)

// refPoint is a point of the reference ring, built straight from the
// package documentation with none of the package's sorting or indexing.
type refPoint struct {
	hash uint32
	id   string
	i    int
}

func refRing(ms []ring.Member, ppw int) []refPoint {
	var pts []refPoint
	for _, m := range ms {
		for i := range m.Weight * ppw {
			pts = append(pts, refPoint{ring.HashKey(binary.BigEndian.AppendUint32([]byte(m.ID), uint32(i))), m.ID, i})
		}
	}
	slices.SortFunc(pts, func(a, b refPoint) int {
		return cmp.Or(cmp.Compare(a.hash, b.hash), cmp.Compare(a.id, b.id), cmp.Compare(a.i, b.i))
	})
	return pts
}

// refLookupN walks the reference ring from key's owner.
func refLookupN(pts []refPoint, key []byte, n int) []string {
	h := ring.HashKey(key)
	p, _ := slices.BinarySearchFunc(pts, h, func(pt refPoint, h uint32) int { return cmp.Compare(pt.hash, h) })
	var out []string
	for range pts {
		if len(out) == n {
			break
		}
		id := pts[p%len(pts)].id
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
		p++
	}
	return out
}

// FuzzRing builds rings from arbitrary member lists and checks New's
// validation and every lookup against the reference ring.
func FuzzRing(f *testing.F) {
	f.Add([]byte("\x03abc\x01\x03abd\x02"), uint8(4), []byte("key"), uint8(2))
	f.Add([]byte("\x01a\x01\x01b\x01\x01c\x01"), uint8(1), []byte(""), uint8(5))
	f.Add([]byte("\x02aa\x00"), uint8(3), []byte("k"), uint8(1))
	f.Add([]byte("\x01a\x01\x01a\x01"), uint8(3), []byte("k"), uint8(1))
	f.Add([]byte("\x00\x01"), uint8(3), []byte("k"), uint8(1))
	f.Add([]byte("\x05peer1\x04\x05peer2\x01"), uint8(0), []byte("k"), uint8(2))
	f.Add([]byte{}, uint8(3), []byte("k"), uint8(1))
	f.Fuzz(func(t *testing.T, spec []byte, ppwByte uint8, key []byte, nByte uint8) {
		// spec is a list of (id length % 6, id bytes, weight % 5).
		var ms []ring.Member
		for len(spec) > 0 && len(ms) < 40 {
			l := min(int(spec[0]%6), len(spec)-1)
			id := string(spec[1 : 1+l])
			spec = spec[1+l:]
			w := 1
			if len(spec) > 0 {
				w, spec = int(spec[0]%5), spec[1:]
			}
			ms = append(ms, ring.Member{ID: id, Weight: w})
		}
		ppw := int(ppwByte % 24)
		n := int(nByte % 8)

		valid := ppw > 0 && len(ms) > 0
		seen := map[string]bool{}
		for _, m := range ms {
			valid = valid && m.ID != "" && m.Weight >= 1 && !seen[m.ID]
			seen[m.ID] = true
		}
		r, err := ring.New(ms, ring.WithPointsPerWeight(ppw))
		if !valid {
			known := []error{ring.ErrBadPointsPerWeight, ring.ErrNoMembers, ring.ErrEmptyID, ring.ErrBadWeight, ring.ErrDuplicateID}
			if !slices.ContainsFunc(known, func(e error) bool { return errors.Is(err, e) }) {
				t.Fatalf("New(%v, ppw %d) = %v, want one of %v", ms, ppw, err, known)
			}
			return
		}
		if err != nil {
			t.Fatalf("New(%v, ppw %d): %v", ms, ppw, err)
		}

		pts := refRing(ms, ppw)
		want := refLookupN(pts, key, n)
		if got := r.LookupN(key, n, nil); !slices.Equal(got, want) {
			t.Fatalf("LookupN(%q, %d) = %v, reference %v", key, n, got, want)
		}
		if got, want := r.Lookup(key), refLookupN(pts, key, 1)[0]; got != want {
			t.Fatalf("Lookup(%q) = %q, reference %q", key, got, want)
		}
		if len(want) != min(n, len(ms)) {
			t.Fatalf("cluster has %d members, want min(n=%d, members=%d)", len(want), n, len(ms))
		}
		collisions := 0
		for i := 1; i < len(pts); i++ {
			if pts[i].hash == pts[i-1].hash {
				collisions++
			}
		}
		if r.Collisions() != collisions || r.Points() != len(pts) {
			t.Fatalf("Collisions, Points = %d, %d; reference %d, %d", r.Collisions(), r.Points(), collisions, len(pts))
		}
		var sum float64
		for _, s := range r.Stats().Shares {
			sum += s.Share
		}
		if sum < 1-1e-9 || sum > 1+1e-9 {
			t.Fatalf("shares sum to %v", sum)
		}
	})
}
