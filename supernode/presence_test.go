package supernode

import (
	"crypto/rand"
	"sync"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/protocol/pb"
)

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	priv, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	testKeys.Store(id, priv)
	return id
}

// testKeys holds the private keys of the IDs newPeerID made, so that the
// tests can sign as those clients.
var testKeys sync.Map

// keyOf returns the private key of a test client.
func keyOf(t testing.TB, id peer.ID) crypto.PrivKey {
	t.Helper()
	k, ok := testKeys.Load(id)
	if !ok {
		t.Fatalf("no key for %s", id)
	}
	return k.(crypto.PrivKey)
}

// presenceClaim is client's signed claim to be attached at sn in seq.
func presenceClaim(t testing.TB, client, sn peer.ID, seq uint64) []byte {
	t.Helper()
	c, err := protocol.SignPresence(keyOf(t, client), sn, seq)
	if err != nil {
		t.Fatal(err)
	}
	return c
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
					r.Attached(client, st.seq, presenceClaim(t, client, ids["self"], st.seq))
				case st.local:
					r.Detached(client, st.seq)
				default:
					loc := st.location
					if loc == "" {
						loc = st.from
					}
					b := presenceBatch(client, ids[loc], st.seq, st.attached)
					if st.attached {
						// Signed as the client would, for the location the
						// record names: the sender may still not speak for
						// another supernode's session.
						b.Records[0].Claim = presenceClaim(t, client, ids[loc], st.seq)
					}
					r.applyPresence(ids[st.from], b)
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
			ls, ok := r.sessions[client]
			seq := ls.seq
			r.mu.Unlock()
			if want := tc.wantSession; seq != want || ok != (want != 0) {
				t.Errorf("local session seq %d (present %v), want %d", seq, ok, want)
			}
		})
	}
}

// TestForgedPresenceRefused: a directory supernode that tells a client's
// home the client is attached to it — with any session seq, up to the
// largest — moves nothing unless the client signed that claim. Before
// claims, such a record with seq MaxUint64 moved a victim's location to
// the attacker, which then acked messages it never delivered.
func TestForgedPresenceRefused(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load}})
	rp.Publish(newRing(t, sn.h.ID()))
	r := sn.r
	honest, attacker := newPeerID(t), newPeerID(t)
	victim := newPeerID(t)
	r.applyPresence(honest, presenceBatch(victim, honest, 5, true))
	if p, ok := presenceOf(r, victim); !ok || p.location != honest {
		t.Fatalf("the victim's genuine record was not stored: %+v %v", p, ok)
	}
	const maxSeq = ^uint64(0)
	attackerSigned, err := protocol.SignPresence(keyOf(t, attacker), attacker, maxSeq)
	if err != nil {
		t.Fatal(err)
	}
	replayed := presenceClaim(t, victim, honest, 5) // the victim's claim for another supernode
	for name, claim := range map[string][]byte{
		"no claim":                         nil,
		"claim signed by the attacker":     attackerSigned,
		"the victim's claim for elsewhere": replayed,
		"garbage":                          []byte("not an envelope"),
	} {
		b := &pb.PresenceBatch{Records: []*pb.PresenceRecord{{
			Client: []byte(victim), Location: []byte(attacker), SessionSeq: maxSeq, Attached: true, Claim: claim,
		}}}
		before := r.stats.PresenceRefused.Load()
		r.applyPresence(attacker, b)
		if p, _ := presenceOf(r, victim); p.location != honest || p.seq != 5 {
			t.Fatalf("%s: the forged record moved the victim to %s seq %d", name, p.location, p.seq)
		}
		if r.stats.PresenceRefused.Load() != before+1 {
			t.Fatalf("%s: refusal not counted", name)
		}
	}
	// The victim's genuine move is still believed.
	r.applyPresence(attacker, &pb.PresenceBatch{Records: []*pb.PresenceRecord{{
		Client: []byte(victim), Location: []byte(attacker), SessionSeq: 6, Attached: true, Claim: presenceClaim(t, victim, attacker, 6),
	}}})
	if p, _ := presenceOf(r, victim); p.location != attacker || p.seq != 6 {
		t.Fatalf("a genuine claim was refused: %+v", p)
	}
}

// TestForgedMembershipRefused: a directory supernode cannot move a
// member's group membership to itself without the member's claim, nor
// with a claim the member signed for another group, another supernode, or
// before its newer one.
func TestForgedMembershipRefused(t *testing.T) {
	n := newTestNet(t)
	var rp ring.Published
	sn := newSupernode(t, n, supernodeConfig{router: &RouterConfig{Ring: rp.Load}})
	rp.Publish(newRing(t, sn.h.ID()))
	r := sn.r
	honest, attacker := newPeerID(t), newPeerID(t)
	member := newPeerID(t)
	claim := func(group string, at peer.ID, seq uint64) []byte {
		c, err := protocol.SignMembership(keyOf(t, member), protocol.Membership{Group: group, Supernode: at, Join: true, Seq: seq})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	join := func(from peer.ID, c []byte) {
		r.applyMembership(from, &pb.MembershipBatch{Records: []*pb.MembershipRecord{{
			Group: "g", Member: []byte(member), Supernode: []byte(from), Join: true, Claim: c,
		}}})
	}
	at := func() peer.ID {
		return r.memberAt("g", member)
	}
	oldAtAttacker := claim("g", attacker, 1) // the member was at the attacker once
	join(honest, claim("g", honest, 2))
	if at() != honest {
		t.Fatalf("a genuine join was refused: member at %q", at())
	}
	for name, c := range map[string][]byte{
		"no claim":                    nil,
		"claim for another group":     claim("other", attacker, 3),
		"claim for another supernode": claim("g", honest, 4),
		"an older claim, replayed":    oldAtAttacker,
		"signed by the attacker itself": func() []byte {
			c, _ := protocol.SignMembership(keyOf(t, attacker), protocol.Membership{Group: "g", Supernode: attacker, Join: true, Seq: 9})
			return c
		}(),
	} {
		join(attacker, c)
		if at() != honest {
			t.Fatalf("%s: the member moved to %s", name, at())
		}
	}
	if got := r.stats.MembershipRefused.Load(); got != 4 {
		t.Fatalf("%d refusals counted, want 4 (the replayed older claim is ignored, not refused)", got)
	}
}
