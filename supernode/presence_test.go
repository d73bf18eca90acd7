package supernode

import (
	"crypto/rand"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
)

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// presenceStep is one event a client's home sees: this supernode's own
// session starting or ending (local), or a presence record from another
// supernode.
type presenceStep struct {
	local    bool   // r.Attached / r.Detached, this supernode's own session
	from     string // "x" or "y": the supernode the record comes from
	location string // where the record says the client is; default from
	seq      uint64
	attached bool
}

// TestPresenceOrderedBySessionSeq: a home orders a client's presence
// records by session seq, so a late "detached" (or "attached") of an older
// session cannot erase (or move back) a newer attachment, and a supernode
// speaks only for its own sessions. The router under test is the client's
// whole home cluster (a one-member ring), so its own sessions' presence is
// applied locally.
func TestPresenceOrderedBySessionSeq(t *testing.T) {
	for _, tc := range []struct {
		name        string
		steps       []presenceStep
		wantAt      string // "self", "x", "y" or "" for no record
		wantSeq     uint64
		wantSession uint64 // the session seq the router re-sends (0: none)
	}{
		{
			name:   "late detach of the older session here keeps the newer one",
			steps:  []presenceStep{{local: true, seq: 1, attached: true}, {local: true, seq: 2, attached: true}, {local: true, seq: 1}},
			wantAt: "self", wantSeq: 2, wantSession: 2,
		},
		{
			name:  "detach of the current session removes the record",
			steps: []presenceStep{{local: true, seq: 2, attached: true}, {local: true, seq: 2}},
		},
		{
			name:   "late detach from the old supernode after the client moved",
			steps:  []presenceStep{{from: "x", seq: 1, attached: true}, {from: "y", seq: 2, attached: true}, {from: "x", seq: 1}},
			wantAt: "y", wantSeq: 2,
		},
		{
			name:   "late detach from the old supernode after the client moved here",
			steps:  []presenceStep{{from: "x", seq: 1, attached: true}, {local: true, seq: 2, attached: true}, {from: "x", seq: 1}},
			wantAt: "self", wantSeq: 2, wantSession: 2,
		},
		{
			name:   "late attach of an older session does not move the client back",
			steps:  []presenceStep{{from: "y", seq: 2, attached: true}, {from: "x", seq: 1, attached: true}},
			wantAt: "y", wantSeq: 2,
		},
		{
			name:   "a newer session elsewhere moves the client",
			steps:  []presenceStep{{local: true, seq: 1, attached: true}, {from: "y", seq: 2, attached: true}},
			wantAt: "y", wantSeq: 2, wantSession: 1,
		},
		{
			name:   "a supernode cannot detach a session at another",
			steps:  []presenceStep{{from: "x", seq: 1, attached: true}, {from: "y", seq: 5}},
			wantAt: "x", wantSeq: 1,
		},
		{
			name:  "a supernode cannot speak for another's sessions",
			steps: []presenceStep{{from: "y", location: "x", seq: 3, attached: true}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newTestNet(t)
			var rp ring.Published
			sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load}})
			rp.Publish(newRing(t, sn.h.ID()))
			r := sn.r
			ids := map[string]peer.ID{"self": sn.h.ID(), "x": newPeerID(t), "y": newPeerID(t)}
			client := newPeerID(t)

			for _, st := range tc.steps {
				switch {
				case st.local && st.attached:
					r.Attached(client, st.seq)
				case st.local:
					r.Detached(client, st.seq)
				default:
					loc := st.location
					if loc == "" {
						loc = st.from
					}
					r.applyPresence(ids[st.from], presenceBatch(client, ids[loc], st.seq, st.attached))
				}
			}

			p, ok := presenceOf(r, client)
			switch {
			case tc.wantAt == "" && ok:
				t.Errorf("record at %s seq %d, want none", p.location, p.seq)
			case tc.wantAt != "" && !ok:
				t.Errorf("no record, want %s seq %d", tc.wantAt, tc.wantSeq)
			case tc.wantAt != "" && (p.location != ids[tc.wantAt] || p.seq != tc.wantSeq):
				t.Errorf("record at %s seq %d, want %s (%s) seq %d", p.location, p.seq, tc.wantAt, ids[tc.wantAt], tc.wantSeq)
			}
			r.mu.Lock()
			seq, ok := r.sessions[client]
			r.mu.Unlock()
			if want := tc.wantSession; seq != want || ok != (want != 0) {
				t.Errorf("local session seq %d (present %v), want %d", seq, ok, want)
			}
		})
	}
}
