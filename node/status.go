package node

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/version"
)

// Status reports the node's state.
func (n *Node) Status() localapi.Status {
	role, why := n.Role()
	s := localapi.Status{
		PeerID:         n.host.ID().String(),
		Role:           string(role),
		ConfiguredRole: string(n.cfg.Role),
		RoleReason:     why,
		Reachability:   strings.ToLower(n.Reachability().String()),
		Capacity:       n.cfg.Capacity,
		StartedAt:      n.started,
		UptimeSeconds:  n.now().Sub(n.started).Seconds(),
		ConnectedPeers: len(n.host.Network().Peers()),
		DirectorySize:  n.dir.Snapshot().Len(),
		Version:        version.Build().Version,
	}
	if n.cfg.Role == config.RoleAuto {
		_, _, crit := n.autoRole()
		for _, c := range crit {
			s.RoleCriteria = append(s.RoleCriteria, localapi.RoleCriterion{Name: c.Name, Held: c.Held, Detail: c.Detail})
		}
		if at := n.roleChangedAt(); !at.IsZero() {
			s.RoleChangedAt = &at
		}
	}
	for _, a := range n.host.Addrs() {
		s.Addrs = append(s.Addrs, a.String())
	}
	s.RingVersion = n.RingVersion()
	if n.client != nil {
		a, ok := n.client.Attachment()
		s.Failovers = a.Failovers
		if ok {
			s.Attachment = &localapi.Attachment{Supernode: a.Supernode.String(), Since: a.Since, Home: a.Home}
		}
	}
	if n.sems != nil && n.serving.Load() {
		for _, sem := range n.sems.All() {
			st := sem.Stats()
			s.Semaphores = append(s.Semaphores, localapi.Semaphore{Name: st.Name, InUse: st.InUse, Max: st.Max, Acquired: st.Acquired, Refused: st.Refused})
		}
	}
	if n.admission != nil {
		s.AttachedClients = n.admission.Load()
	}
	if n.router != nil {
		if o, ok := n.router.Offline(); ok {
			s.OfflineStore = &localapi.OfflineStore{Messages: o.Messages, Recipients: o.Recipients, Bytes: o.Bytes, MaxBytes: o.MaxBytes}
		}
		if l, ok := n.router.NoLoss(); ok {
			s.NoLoss = &localapi.NoLoss{
				ReplayGroups: l.ReplayGroups, ReplayMessages: l.ReplayEntries, ReplayBytes: l.ReplayBytes,
				ResumesDone: l.ReplaysDone, ResumesWithGap: l.ReplaysGap, FramesReplayed: l.Replayed,
				ReplicasHeld: l.ReplicasHeld, ReplicationTimeouts: l.ReplicationTimeouts,
				OfflineStored: l.OfflineStored, OfflineForwarded: l.OfflineDelivered, OfflineAcked: l.OfflineDeleted,
				OfflineExpired: l.OfflineExpired, OfflineRefused: l.OfflineRefused,
			}
		}
	}
	s.Relay = n.relayStatus()
	s.Refusals = n.refusals()
	if c, ok := n.MegaCert(); ok {
		s.Role = "mega"
		s.RoleReason = fmt.Sprintf("operator certificate %d, capacity %d, until %s", c.Serial, c.Capacity, c.NotAfter.UTC().Format(time.RFC3339))
		s.Capacity = int(c.Capacity)
		s.Mega = &localapi.MegaCert{Serial: c.Serial, Capacity: c.Capacity, NotBefore: c.NotBefore, NotAfter: c.NotAfter}
	}
	return s
}

// Peers lists the connected peers, sorted by ID.
func (n *Node) Peers() []localapi.Peer {
	snap := n.dir.Snapshot()
	attached := map[peer.ID]time.Time{}
	if n.admission != nil {
		for _, si := range n.admission.Sessions() {
			attached[si.Peer] = si.Since
		}
	}
	out := []localapi.Peer{}
	for _, id := range n.host.Network().Peers() {
		p := localapi.Peer{ID: id.String()}
		for _, c := range n.host.Network().ConnsToPeer(id) {
			p.Addrs = append(p.Addrs, c.RemoteMultiaddr().String())
			if c.Stat().Direction == network.DirInbound {
				p.Direction = "inbound"
			} else if p.Direction == "" {
				p.Direction = "outbound"
			}
		}
		_, p.Supernode = snap.Get(id)
		if since, ok := attached[id]; ok {
			p.Attached, p.AttachedSince = true, &since
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b localapi.Peer) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Supernodes lists the directory, sorted by ID.
func (n *Node) Supernodes() []localapi.Supernode {
	out := []localapi.Supernode{}
	for _, e := range n.dir.Snapshot().Entries {
		s := localapi.Supernode{
			ID: e.ID.String(), Role: e.Role.String(), Capacity: e.Capacity, Load: e.Load, Spare: int64(e.Capacity) - int64(e.Load),
			Seq: e.Seq, LastSeen: e.LastSeen, Expires: e.Expires, Self: e.ID == n.ID(),
		}
		for _, a := range e.Addrs {
			s.Addrs = append(s.Addrs, a.String())
		}
		if e.Cert != nil {
			until := e.Cert.NotAfter
			s.MegaUntil = &until
		}
		out = append(out, s)
	}
	return out
}

// RingInfo describes the live ring.
func (n *Node) RingInfo() localapi.Ring {
	r := n.rings.Load()
	if r == nil {
		return localapi.Ring{}
	}
	return localapi.Ring{Stats: r.Stats()}
}

// refusals reads every non-zero refusal counter from the node's registry:
// the series named *_refused_total or *_rejected_total, wherever they are
// registered (directory, certificates, client, supernode, relay), so a
// new refusal counter appears in the status without listing it here.
func (n *Node) refusals() []localapi.Refusal {
	mfs, err := n.reg.Gather()
	if err != nil {
		return nil
	}
	var out []localapi.Refusal
	for _, mf := range mfs {
		name := mf.GetName()
		if !strings.HasSuffix(name, "_refused_total") && !strings.HasSuffix(name, "_rejected_total") {
			continue
		}
		for _, m := range mf.GetMetric() {
			c := m.GetCounter()
			if c == nil || c.GetValue() == 0 {
				continue
			}
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+"="+lp.GetValue())
			}
			out = append(out, localapi.Refusal{Metric: strings.TrimPrefix(name, "overlayd_"), Labels: strings.Join(labels, ","), Count: uint64(c.GetValue())})
		}
	}
	return out
}
