package testnet

import (
	"sync"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
)

// partition splits the network in two sides through a connection gater on
// every node: while it is on, a connection between peers of different
// sides is refused when dialled and when secured (the first moment an
// inbound connection's peer is known).
type partition struct {
	mu    sync.RWMutex
	on    bool
	sides map[peer.ID]int
}

func newPartition() *partition { return &partition{sides: map[peer.ID]int{}} }

func (p *partition) register(id peer.ID, side int) {
	p.mu.Lock()
	p.sides[id] = side
	p.mu.Unlock()
}

func (p *partition) set(on bool) {
	p.mu.Lock()
	p.on = on
	p.mu.Unlock()
}

func (p *partition) side(id peer.ID) int {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.sides[id]
}

// allowed reports whether a and b may be connected now.
func (p *partition) allowed(a, b peer.ID) bool {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return !p.on || p.sides[a] == p.sides[b]
}

// gaterFor returns the gater of one node. It knows the node by its member
// slot: the peer ID is registered once the node has started.
func (p *partition) gaterFor(m *member) *gater { return &gater{p: p, self: m} }

type gater struct {
	p    *partition
	self *member
}

func (g *gater) selfID() (peer.ID, bool) {
	id, err := peer.IDFromPrivateKey(g.self.key)
	return id, err == nil
}

func (g *gater) ok(remote peer.ID) bool {
	self, known := g.selfID()
	return !known || g.p.allowed(self, remote)
}

func (g *gater) InterceptPeerDial(p peer.ID) bool                 { return g.ok(p) }
func (g *gater) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return g.ok(p) }
func (g *gater) InterceptAccept(network.ConnMultiaddrs) bool      { return true }
func (g *gater) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return g.ok(p)
}
func (g *gater) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }
