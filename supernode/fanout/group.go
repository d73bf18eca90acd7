package fanout

import (
	"sync"
	"sync/atomic"
)

// Group is a set of members (ID and [Sink]) partitioned by the engine's
// workers. It is copy-on-write: [Group.Add] and [Group.Remove] publish a new
// immutable partition with one atomic store, and [Engine.Fanout] reads the
// current one with one atomic load, so membership changes never wait for a
// fanout in progress and a fanout never sees a half-applied change.
//
// Cost: Add of a new ID is amortised O(workers) (the new member is appended
// in place beyond what any published partition can see); Remove, and Add of
// an ID already present, copy that member's worker partition, O(members /
// workers).
//
// A Group is safe for concurrent use and belongs to the engine that made it.
type Group struct {
	e *Engine

	// submit orders this group's jobs across the worker queues (see
	// Engine.Fanout).
	submit sync.Mutex

	snap atomic.Pointer[snapshot]

	mu    sync.Mutex // serialises Add and Remove
	index map[string]slot
	ids   [][]string // ids[w][i] is the ID of snap.parts[w][i]; mutated in place, writer-only
}

// snapshot is one published, immutable partition. parts[w] holds the sinks
// served by worker w. Elements at indices below a published length are never
// written again; a writer may only append beyond it.
type snapshot struct {
	parts [][]Sink
	n     int
}

// slot locates a member in the current partition.
type slot struct {
	w, i int
}

// NewGroup returns an empty group of e.
func (e *Engine) NewGroup() *Group {
	g := &Group{
		e:     e,
		index: make(map[string]slot),
		ids:   make([][]string, len(e.queues)),
	}
	g.snap.Store(&snapshot{parts: make([][]Sink, len(e.queues))})
	return g
}

// Len returns the number of members.
func (g *Group) Len() int { return g.snap.Load().n }

// Add makes s the sink of member id. If id is already a member its sink is
// replaced; Fanouts already in flight may still offer to the old sink. s must
// not be nil. A Fanout that starts after Add returns includes the member.
func (g *Group) Add(id string, s Sink) {
	if s == nil {
		panic("fanout: Group.Add with nil sink")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.snap.Load()
	parts := make([][]Sink, len(old.parts))
	copy(parts, old.parts)
	n := old.n
	if at, ok := g.index[id]; ok {
		p := make([]Sink, len(parts[at.w]))
		copy(p, parts[at.w])
		p[at.i] = s
		parts[at.w] = p
	} else {
		w := g.e.Worker(id)
		// append writes only beyond len(parts[w]), which no published
		// snapshot covers: lengths on one backing array only ever grow,
		// because Remove and replacement copy to a new array.
		parts[w] = append(parts[w], s)
		g.ids[w] = append(g.ids[w], id)
		g.index[id] = slot{w: w, i: len(parts[w]) - 1}
		n++
	}
	g.snap.Store(&snapshot{parts: parts, n: n})
}

// Remove removes member id; it does nothing if id is not a member. A Fanout
// that starts after Remove returns does not include the member; one already
// in flight may still offer to its sink.
func (g *Group) Remove(id string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.index[id]
	if !ok {
		return
	}
	old := g.snap.Load()
	parts := make([][]Sink, len(old.parts))
	copy(parts, old.parts)
	// Swap-delete into a new array: readers of old keep theirs intact.
	last := len(parts[at.w]) - 1
	p := make([]Sink, last, last+last/8+1)
	copy(p, parts[at.w][:last])
	ids := g.ids[at.w]
	if at.i != last {
		p[at.i] = parts[at.w][last]
		ids[at.i] = ids[last]
		g.index[ids[at.i]] = at
	}
	ids[last] = ""
	g.ids[at.w] = ids[:last]
	delete(g.index, id)
	parts[at.w] = p
	g.snap.Store(&snapshot{parts: parts, n: old.n - 1})
}
