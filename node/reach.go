package node

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/network"
)

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

// Reachability is the node's public reachability as it knows it now.
func (n *Node) Reachability() network.Reachability {
	if n.pinnedReach != nil {
		return *n.pinnedReach
	}
	return network.ReachabilityUnknown
}
