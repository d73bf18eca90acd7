package fanout

// workerOfForTest returns the worker whose partition in g's current snapshot
// holds id's sink, or -1 if id is not a member, and whether that partition
// entry is s.
func (g *Group) workerOfForTest(id string, s Sink) (int, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.index[id]
	if !ok {
		return -1, false
	}
	return at.w, g.snap.Load().parts[at.w][at.i] == s
}
