package node

import (
	"context"
	"errors"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
)

// The node's wiring of circuit relay v2 (package node/circuit): the relay
// service runs while the node is a supernode, beside the locate protocol
// that tells clients where a peer is attached; the reservation follows the
// client's session (circuitAttached) and the node's reachability
// (circuit.Reach); ping goes through the relay of the supernode Locate
// names (circuit.Pinger).

// startRelay starts the circuit relay v2 service and the locate protocol
// of the supernode role, sized by the current attached-peers capacity. It
// needs the admission (only attached clients may reserve). Calling it while
// the relay runs does nothing.
func (n *Node) startRelay() error {
	if n.admission == nil || n.router == nil || n.host == nil || n.relay == nil {
		return errors.New("relay: start the supernode role (admission) and the node first")
	}
	capacity := n.cfg.Capacity
	if n.sems != nil {
		capacity = n.sems.Attached.Max()
	}
	started, err := n.relay.StartService(capacity, n.admission.Has)
	if err != nil || !started {
		return err
	}
	n.host.SetStreamHandler(protocol.LocateID, n.router.HandleLocate)
	return nil
}

// stopRelay stops the relay service and the locate protocol, if running.
// Idempotent.
func (n *Node) stopRelay() {
	if n.relay == nil || !n.relay.StopService() {
		return
	}
	if n.host != nil {
		n.host.RemoveStreamHandler(protocol.LocateID)
	}
}

// relayStatus is the relay part of the status: the service on a
// supernode, the reservation on a client.
func (n *Node) relayStatus() *localapi.Relay {
	if n.relay == nil {
		return &localapi.Relay{Reachability: n.Reachability().String()}
	}
	return n.relay.Status()
}

// circuitAttached is the client's session hook (client.WithSessionHook):
// the relay reservation follows the session. It never blocks.
func (n *Node) circuitAttached(sn peer.ID) (detached func()) {
	if n.relay == nil {
		return func() {}
	}
	return n.relay.Attached(sn)
}

// RelayAddrs returns this node's relayed addresses (empty while it holds no
// reservation).
func (n *Node) RelayAddrs() []ma.Multiaddr {
	if n.relay == nil {
		return nil
	}
	return n.relay.Addrs()
}

// WithReachability pins what the node believes of its own public
// reachability instead of learning it from AutoNAT: tests and testnets on
// loopback, where every address is private, say which nodes count as
// public.
func WithReachability(r network.Reachability) Option {
	return func(n *Node) error {
		switch r {
		case network.ReachabilityPublic, network.ReachabilityPrivate, network.ReachabilityUnknown:
		default:
			return errors.New("WithReachability: unknown reachability")
		}
		n.pinnedReach = &r
		return nil
	}
}

// Reachability is the node's public reachability as it knows it now: the
// pinned value, else the latest AutoNAT verdict (Unknown until there is one).
func (n *Node) Reachability() network.Reachability { return n.reach.Get() }

// startReachability starts the relay client, which keeps a relay
// reservation on the attached supernode while the node is not public, and
// learns the node's reachability from AutoNAT (unless it is pinned).
// Everything it starts stops with ctx; the relay service, if running, is
// closed then too.
func (n *Node) startReachability(ctx context.Context) error {
	relay, err := circuit.New(circuit.Config{
		Host: n.host, Budgets: &n.relayBudgets, Settings: n.cfg.RelaySettings(), Registry: n.reg,
		Reachability: n.reach.Get, Now: n.now, Seed: n.seed(), Log: n.log,
	})
	if err != nil {
		return err
	}
	n.relay = relay
	n.goLoop(func() {
		<-ctx.Done()
		n.stopRelay()
	})
	n.goLoop(func() { relay.RunReservations(ctx) })
	watch, err := n.reach.Watch(n.host, relay.Kick)
	if err != nil {
		return err
	}
	if watch != nil {
		n.goLoop(func() { watch(ctx) })
	}
	return nil
}

// addrsOf returns the addresses of supernode p: this node's own, or the
// directory's.
func (n *Node) addrsOf(p peer.ID) []ma.Multiaddr {
	if p == n.ID() {
		return n.host.Addrs()
	}
	if e, ok := n.dir.Snapshot().Get(p); ok {
		return e.Addrs
	}
	return nil
}

// Locate returns the supernode target is attached to and its addresses:
// a supernode looks in its presence records; an ordinary node asks its
// own supernode. It fails with client.ErrNotLocated when no supernode
// knows target.
func (n *Node) Locate(ctx context.Context, target peer.ID) (peer.AddrInfo, error) {
	if n.router != nil && n.serving.Load() {
		loc, ok := n.router.Locate(target)
		if !ok {
			return peer.AddrInfo{}, client.ErrNotLocated
		}
		return peer.AddrInfo{ID: loc, Addrs: n.addrsOf(loc)}, nil
	}
	if n.client == nil {
		return peer.AddrInfo{}, client.ErrNotAttached
	}
	ai, err := n.client.Locate(ctx, target)
	if err == nil && len(ai.Addrs) == 0 {
		ai.Addrs = n.addrsOf(ai.ID)
	}
	return ai, err
}

// Ping pings target count times and reports the path (circuit.Pinger):
// directly, else through the relay of target's supernode, then directly
// again if hole punching opens a connection within wait.
func (n *Node) Ping(ctx context.Context, target peer.ID, count int, wait time.Duration) (localapi.PingResponse, error) {
	return circuit.Pinger{Host: n.host, Locator: n}.Ping(ctx, target, count, wait)
}
