package fanout

import (
	"fmt"
	"testing"
)

func TestGroupMembership(t *testing.T) {
	checkGoroutines(t)
	e := newEngine(t, 3)
	type sinks = map[string]*atomicCountSink
	for _, tc := range []struct {
		name   string
		change func(g *Group, s sinks)
		want   map[string]int64 // frames each sink got from one Fanout after change
		len    int
	}{
		{"add", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Add("b", s["b"])
		}, map[string]int64{"a": 1, "b": 1}, 2},
		{"replace sink of a member", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Add("a", s["b"])
		}, map[string]int64{"a": 0, "b": 1}, 1},
		{"remove", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Add("b", s["b"])
			g.Remove("a")
		}, map[string]int64{"a": 0, "b": 1}, 1},
		{"remove unknown", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Remove("zzz")
		}, map[string]int64{"a": 1}, 1},
		{"remove then add again", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Remove("a")
			g.Remove("a")
			g.Add("a", s["a"])
		}, map[string]int64{"a": 1}, 1},
		{"one sink under two ids", func(g *Group, s sinks) {
			g.Add("a", s["a"])
			g.Add("a2", s["a"])
		}, map[string]int64{"a": 2}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := e.NewGroup()
			s := sinks{"a": {}, "b": {}}
			tc.change(g, s)
			if g.Len() != tc.len {
				t.Fatalf("Len = %d, want %d", g.Len(), tc.len)
			}
			w := newWaiter()
			if err := e.Fanout(g, []byte("x"), w.done); err != nil {
				t.Fatal(err)
			}
			w.wait(t, 1)
			for id, want := range tc.want {
				if got := s[id].n.Load(); got != want {
					t.Errorf("sink %s got %d frames, want %d", id, got, want)
				}
			}
		})
	}
}

// TestGroupRemoveKeepsOthers removes members in a scattered order from a
// large group and checks, after each removal, that exactly the remaining
// members are placed on their workers (swap-delete bookkeeping).
func TestGroupRemoveKeepsOthers(t *testing.T) {
	e := newEngine(t, 4)
	g := e.NewGroup()
	const n = 400
	s := make([]*countSink, n)
	for i := range s {
		s[i] = &countSink{}
		g.Add(fmt.Sprint(i), s[i])
	}
	removed := make([]bool, n)
	for k := range n / 2 {
		i := (k * 37) % n
		if removed[i] {
			continue
		}
		g.Remove(fmt.Sprint(i))
		removed[i] = true
		left := 0
		for j := range s {
			w, ok := g.workerOfForTest(fmt.Sprint(j), s[j])
			if removed[j] != (w == -1) || (!removed[j] && (!ok || w != e.Worker(fmt.Sprint(j)))) {
				t.Fatalf("after removing %d: member %d at worker %d (sink ok %v), removed %v", i, j, w, ok, removed[j])
			}
			if !removed[j] {
				left++
			}
		}
		if g.Len() != left {
			t.Fatalf("Len = %d, want %d", g.Len(), left)
		}
	}
}

func TestGroupAddNilSinkPanics(t *testing.T) {
	e, err := New(1)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Add with a nil sink did not panic")
		}
	}()
	e.NewGroup().Add("a", nil)
}
