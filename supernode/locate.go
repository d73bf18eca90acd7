package supernode

import "github.com/libp2p/go-libp2p/core/peer"

// Locate returns the supernode client is attached to: this one when it is
// attached here, else as the presence records say (the lookup cache, this
// supernode's own records, then the client's home cluster, asked under the
// lookups semaphore). It blocks for at most one lookup round trip per home
// member.
func (r *Router) Locate(client peer.ID) (peer.ID, bool) {
	if r.adm.Has(client) {
		return r.self(), true
	}
	return r.locate(client, false)
}
