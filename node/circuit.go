package node

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
)

// The node's wiring of circuit relay v2 (package node/circuit): the relay
// service runs while the node is a supernode, beside the locate protocol
// that tells clients where a peer is attached; the reservation follows the
// client's session (circuitAttached) and the node's reachability (reach.go).

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
