// Package dedup is the bounded window of recently seen message keys that
// both a client (dropping a message delivered twice) and a supernode
// (routing a sender's retry with a fresh lookup) keep.
//
// A Window remembers the last Size keys it was shown and forgets the oldest
// first, so its memory is bounded by Size whatever the network sends. It is
// not safe for concurrent use: its owner holds its own lock around it.
package dedup

// Window remembers the most recent keys, up to its size.
type Window struct {
	seen  map[string]struct{}
	order []string
	next  int
}

// New returns a window of size keys (at least 1).
func New(size int) *Window {
	size = max(size, 1)
	return &Window{seen: make(map[string]struct{}, size), order: make([]string, size)}
}

// Seen records key and reports whether it was already in the window. When
// the window is full the oldest key is forgotten. Keys are never empty (an
// empty key is reported as seen and not recorded).
func (w *Window) Seen(key string) bool {
	if key == "" {
		return true
	}
	if _, ok := w.seen[key]; ok {
		return true
	}
	if old := w.order[w.next]; old != "" {
		delete(w.seen, old)
	}
	w.order[w.next] = key
	w.next = (w.next + 1) % len(w.order)
	w.seen[key] = struct{}{}
	return false
}

// Len returns how many keys the window holds now.
func (w *Window) Len() int { return len(w.seen) }
