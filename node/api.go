package node

import (
	"context"

	"github.com/overlayd/overlayd/node/api"
	"github.com/overlayd/overlayd/node/circuit"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/version"
)

// The node's wiring of its local API (package node/api holds every route
// and builds the answers): the listener and token of node/localapi, the
// node's parts for the routes, and the state the status is built from.

func (n *Node) startAPI(ctx context.Context) error {
	h, err := api.Handler(api.Config{
		Status:     n.Status,
		Peers:      n.Peers,
		Supernodes: n.Supernodes,
		Ring:       n.RingInfo,
		Client:     n.client,
		Tunnels:    n.tunnels,
		Pinger:     circuit.Pinger{Host: n.host, Locator: n},
		Operator:   n,
		Lifetime:   n.httpCtx,
	})
	if err != nil {
		return err
	}
	ln, token, err := localapi.Listen(ctx, n.cfg.DataDir, n.cfg.APIListen)
	if err != nil {
		return err
	}
	n.apiSrv = n.serve(ln, localapi.RequireToken(token, h))
	n.log.Info("local API", "addr", ln.Addr().String())
	return nil
}

// Status reports the node's state (api.Status).
func (n *Node) Status() localapi.Status {
	st := api.State{
		Host: n.host, ConfiguredRole: string(n.cfg.Role), Reachability: n.Reachability(),
		Capacity: n.cfg.Capacity, Started: n.started, Now: n.now(), Directory: n.dir.Snapshot(),
		RingVersion: n.RingVersion(), Client: n.client, Serving: n.serving.Load(), Sems: n.sems,
		Admission: n.admission, Router: n.router, Relay: n.relayStatus(), Registry: n.reg,
		Version: version.Build().Version,
	}
	role, why := n.Role()
	st.Role, st.RoleReason = string(role), why
	if n.roles != nil {
		_, st.RoleCriteria = n.roles.State()
		st.RoleChangedAt = n.roles.ChangedAt()
	}
	if c, ok := n.MegaCert(); ok {
		st.Mega = &c
	}
	return api.Status(st)
}

// Peers lists the connected peers, sorted by ID.
func (n *Node) Peers() []localapi.Peer { return api.Peers(n.host, n.dir.Snapshot(), n.admission) }

// Supernodes lists the directory, sorted by ID.
func (n *Node) Supernodes() []localapi.Supernode { return api.Supernodes(n.dir.Snapshot(), n.ID()) }

// RingInfo describes the live ring.
func (n *Node) RingInfo() localapi.Ring { return api.Ring(n.rings.Load()) }
