package circuit

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/event"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/p2p/host/eventbus"
)

// Reach is the node's public reachability as it knows it: a pinned value,
// else the latest AutoNAT verdict (Unknown until there is one). The relay
// client reads it (Config.Reachability is Get) to decide whether to hold a
// reservation. Safe for concurrent use.
type Reach struct {
	pinned *network.Reachability
	v      atomic.Int32
	log    *slog.Logger
}

// NewReach returns a Reach pinned to *pinned, or learning from AutoNAT
// (Watch) when pinned is nil. Tests and testnets on loopback, where every
// address is private, pin which nodes count as public.
func NewReach(pinned *network.Reachability, log *slog.Logger) *Reach {
	return &Reach{pinned: pinned, log: log}
}

// Get returns the reachability known now.
func (r *Reach) Get() network.Reachability {
	if r.pinned != nil {
		return *r.pinned
	}
	return network.Reachability(r.v.Load())
}

// Set records v and reports whether it changed (logged). Watch's loop
// calls it; a pinned Reach ignores it.
func (r *Reach) Set(v network.Reachability) bool {
	if r.pinned != nil {
		return false
	}
	old := network.Reachability(r.v.Swap(int32(v)))
	if old == v {
		return false
	}
	r.log.Info("reachability changed", "from", old.String(), "to", v.String())
	return true
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

// Watch subscribes to h's AutoNAT events now, so that none is missed (both
// are stateful: a late subscriber gets the latest), and returns the loop
// that follows them until ctx ends, calling changed (the relay client's
// Kick) on every change; the caller runs it on a goroutine it owns. A
// pinned Reach subscribes to nothing and returns nil.
func (r *Reach) Watch(h host.Host, changed func()) (func(ctx context.Context), error) {
	if r.pinned != nil {
		r.log.Info("reachability pinned", "reachability", r.pinned.String())
		return nil, nil
	}
	sub, err := h.EventBus().Subscribe([]any{
		new(event.EvtLocalReachabilityChanged),
		new(event.EvtHostReachableAddrsChanged),
	}, eventbus.Name("overlayd reachability"))
	if err != nil {
		return nil, fmt.Errorf("reachability: subscribe: %w", err)
	}
	return func(ctx context.Context) {
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
					r.log.Debug("autonat v2", "reachable", e.Reachable, "unreachable", e.Unreachable, "unknown", e.Unknown)
				}
				if r.Set(st.value()) {
					changed()
				}
			}
		}
	}, nil
}
