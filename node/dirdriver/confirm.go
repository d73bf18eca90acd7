package dirdriver

import (
	"context"
	"slices"
	"sync"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	libp2pprotocol "github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/protocol"
)

// Confirmation of announced supernodes (open networks). Announcing costs
// nothing: a key and a signature. A supernode therefore puts an entry on
// its ring only once it has confirmed it: it holds a connection to the
// entry's peer ID (authenticated by the security handshake) whose remote
// address is at one of the IP addresses the entry announced — the
// supernode dialled the announced address, or the peer connected from it —
// and identify on that connection lists the attach protocol. So every
// supernode on a supernode's ring is a live host serving overlayd at the
// address it claims, and the per-subnet limit (overlay/cluster) then
// bounds how many one attacker can place. meshLoop dials every entry of
// the directory, so honest supernodes confirm each other within one dial.
//
// Confirmation is sticky for the entry's life: a supernode that later
// becomes unreachable leaves the ring when its announcements stop, as
// before. Only serving supernodes of open networks filter their rings
// (clients are not connected to every supernode; their rings guide their
// own choices only, and failover passes reserve slots for supernodes they
// know). In a certified network the operator's certificate is the gate.

// confirmations is the set of confirmed supernodes.
type confirmations struct {
	mu      sync.Mutex
	ok      map[peer.ID]bool
	gen     uint64        // bumped on every new confirmation
	changed chan struct{} // coalesced signal to the ring loop
}

func newConfirmations() *confirmations {
	return &confirmations{ok: map[peer.ID]bool{}, changed: make(chan struct{}, 1)}
}

// add confirms p; it reports whether p is new.
func (c *confirmations) add(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ok[p] {
		return false
	}
	c.ok[p] = true
	c.gen++
	select {
	case c.changed <- struct{}{}:
	default:
	}
	return true
}

// kick asks the ring loop to rebuild: whether the ring is filtered changed
// (the node began or stopped serving).
func (c *confirmations) kick() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// has reports whether p is confirmed.
func (c *confirmations) has(p peer.ID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ok[p]
}

// generation changes whenever the set grows.
func (c *confirmations) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// forget drops peers no longer in the directory, so the set is bounded by
// the directory.
func (c *confirmations) forget(snap *directory.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for p := range c.ok {
		if _, live := snap.Get(p); !live {
			delete(c.ok, p)
		}
	}
}

// ServingChanged tells the driver that the node began or stopped playing
// the supernode role: its ring is filtered by confirmation only while it
// serves, so the ring loop rebuilds.
func (d *Driver) ServingChanged() { d.confirm.kick() }

// ConfirmedForTest reports whether p is a supernode this node confirmed.
func (d *Driver) ConfirmedForTest(p peer.ID) bool { return d.confirm.has(p) }

// confirms is the pure rule: a connection from remote, whose identify
// listed protos, confirms an entry that announced addrs when it speaks
// the attach protocol and remote's IP is one the entry announced.
func confirms(remote ma.Multiaddr, protos []libp2pprotocol.ID, addrs []ma.Multiaddr) bool {
	if !slices.Contains(protos, libp2pprotocol.ID(protocol.AttachID)) {
		return false
	}
	ip, err := manet.ToIP(remote)
	if err != nil {
		return false
	}
	for _, a := range addrs {
		if aip, err := manet.ToIP(a); err == nil && aip.Equal(ip) {
			return true
		}
	}
	return false
}

// filterConfirmed returns snap with only the entries a serving supernode
// of an open network may put on its ring: itself, and confirmed ones.
func (d *Driver) filterConfirmed(snap *directory.Snapshot) *directory.Snapshot {
	out := &directory.Snapshot{Version: snap.Version, Membership: snap.Membership, Entries: make([]directory.Entry, 0, len(snap.Entries))}
	self := d.cfg.Host.ID()
	for _, e := range snap.Entries {
		if e.ID == self || d.confirm.has(e.ID) {
			out.Entries = append(out.Entries, e)
		}
	}
	return out
}

// confirmsRing reports whether this node filters its ring by confirmation
// now: it serves, and the network is open.
func (d *Driver) confirmsRing() bool { return d.cfg.Serving() && !d.cfg.Certified }

// confirmLoop confirms directory entries as identify completes on
// connections to them, and re-checks the open connections when the
// directory changes (an entry may be announced after its connection was
// identified).
func (d *Driver) confirmLoop(ctx context.Context) {
	h, dir := d.cfg.Host, d.cfg.Dir
	sub, err := h.EventBus().Subscribe(new(event.EvtPeerIdentificationCompleted))
	if err != nil {
		d.log.Error("confirmations: subscribe to identify", "err", err)
		return
	}
	defer sub.Close()
	changes, cancel := dir.Subscribe()
	defer cancel()
	check := func(p peer.ID, c network.Conn, protos []libp2pprotocol.ID) {
		e, ok := dir.Snapshot().Get(p)
		if ok && e.Role == protocol.RoleSupernode && confirms(c.RemoteMultiaddr(), protos, e.Addrs) && d.confirm.add(p) {
			d.log.Debug("supernode confirmed", "peer", p.ShortString(), "at", c.RemoteMultiaddr())
		}
	}
	recheck := func() {
		snap := dir.Snapshot()
		d.confirm.forget(snap)
		for _, e := range snap.Entries {
			if e.ID == h.ID() || e.Role != protocol.RoleSupernode || d.confirm.has(e.ID) {
				continue
			}
			protos, err := h.Peerstore().GetProtocols(e.ID)
			if err != nil {
				continue
			}
			for _, c := range h.Network().ConnsToPeer(e.ID) {
				check(e.ID, c, protos)
			}
		}
	}
	recheck() // connections identified before this loop subscribed
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.Out():
			if !ok {
				return
			}
			id := ev.(event.EvtPeerIdentificationCompleted)
			if id.Conn != nil {
				check(id.Peer, id.Conn, id.Protocols)
			}
		case <-changes:
			recheck()
		}
	}
}
