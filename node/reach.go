package node

import (
	"context"
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"

	"github.com/overlayd/overlayd/node/circuit"
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

// Reachability is the node's public reachability as it knows it now: the
// pinned value, else the latest AutoNAT verdict (Unknown until there is one).
func (n *Node) Reachability() network.Reachability {
	if n.pinnedReach != nil {
		return *n.pinnedReach
	}
	return network.Reachability(n.reach.Load())
}

// reachState is what AutoNAT told the node. AutoNAT v2 (per address, only
// public addresses are tested) is preferred: any address confirmed
// reachable makes the node public, otherwise any address confirmed
// unreachable makes it private. Without a v2 verdict the node takes AutoNAT
// v1's (EvtLocalReachabilityChanged). On a network of private addresses
// (loopback, a LAN) neither tests anything and the node stays Unknown, which
// counts as "not public": it reserves a relay slot.
type reachState struct {
	v1, v2 network.Reachability
}

func (s reachState) value() network.Reachability {
	if s.v2 != network.ReachabilityUnknown {
		return s.v2
	}
	return s.v1
}

// v2Reachability reduces AutoNAT v2's per-address verdicts to one value.
func v2Reachability(e event.EvtHostReachableAddrsChanged) network.Reachability {
	switch {
	case len(e.Reachable) > 0:
		return network.ReachabilityPublic
	case len(e.Unreachable) > 0:
		return network.ReachabilityPrivate
	}
	return network.ReachabilityUnknown
}

// startReachability learns the node's reachability from AutoNAT (unless it
// is pinned) and starts the relay client, which keeps a relay reservation
// on the attached supernode while the node is not public. It subscribes
// before returning, so no event is missed (both events are stateful: a
// late subscriber gets the latest). Everything it starts stops with ctx;
// the relay service, if running, is closed then too.
func (n *Node) startReachability(ctx context.Context) error {
	relay, err := circuit.New(circuit.Config{
		Host: n.host, Budgets: &n.relayBudgets, Settings: n.cfg.RelaySettings(), Registry: n.reg,
		Reachability: n.Reachability, Now: n.now, Seed: n.seed(), Log: n.log,
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
	if n.pinnedReach != nil {
		n.log.Info("reachability pinned", "reachability", n.pinnedReach.String())
		return nil
	}
	sub, err := n.host.EventBus().Subscribe([]any{
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtHostReachableAddrsChanged),
	}, eventbus.Name("overlayd reachability"))
	if err != nil {
		return fmt.Errorf("reachability: subscribe: %w", err)
	}
	n.goLoop(func() {
		defer sub.Close()
		var st reachState
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-sub.Out():
				if !ok {
					return
				}
				switch e := e.(type) {
				case event.EvtLocalReachabilityChanged:
					st.v1 = e.Reachability
				case event.EvtHostReachableAddrsChanged:
					st.v2 = v2Reachability(e)
					n.log.Debug("autonat v2", "reachable", e.Reachable, "unreachable", e.Unreachable, "unknown", e.Unknown)
				}
				n.setReachability(st.value())
			}
		}
	})
	return nil
}

// setReachability records r, logs a change and tells the relay client.
func (n *Node) setReachability(r network.Reachability) {
	old := network.Reachability(n.reach.Swap(int32(r)))
	if old == r {
		return
	}
	n.log.Info("reachability changed", "from", old.String(), "to", r.String())
	n.relay.Kick()
}
