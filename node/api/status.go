package api

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/role"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
	"github.com/overlayd/overlayd/supernode"
	"github.com/overlayd/overlayd/supernode/capacity"
)

// State is what the status is built from: the node reads it at each
// request (Status). The pointers are nil where the node has no such part.
type State struct {
	Host host.Host
	// Role is the role played now and why; ConfiguredRole the flag's.
	Role, ConfiguredRole, RoleReason string
	// RoleCriteria and RoleChangedAt are --role auto's (zero otherwise).
	RoleCriteria  []role.Criterion
	RoleChangedAt time.Time
	Reachability  network.Reachability
	Capacity      int
	Started, Now  time.Time
	Directory     *directory.Snapshot
	RingVersion   string
	Client        *client.Client // nil on a pinned supernode
	// Sems are shown while Serving.
	Serving   bool
	Sems      *capacity.Set
	Admission *supernode.Admission
	Router    *supernode.Router
	Relay     *localapi.Relay
	// Registry is read for the refusal counters.
	Registry prometheus.Gatherer
	// Mega is this node's mega-supernode certificate, if it is one.
	Mega *protocol.MegaCert
	// Version is the build's.
	Version string
}

// Status reports the node's state.
func Status(st State) localapi.Status {
	s := localapi.Status{
		PeerID:         st.Host.ID().String(),
		Role:           st.Role,
		ConfiguredRole: st.ConfiguredRole,
		RoleReason:     st.RoleReason,
		Reachability:   strings.ToLower(st.Reachability.String()),
		Capacity:       st.Capacity,
		StartedAt:      st.Started,
		UptimeSeconds:  st.Now.Sub(st.Started).Seconds(),
		ConnectedPeers: len(st.Host.Network().Peers()),
		DirectorySize:  st.Directory.Len(),
		Version:        st.Version,
		RingVersion:    st.RingVersion,
		Relay:          st.Relay,
		Refusals:       refusals(st.Registry),
	}
	for _, c := range st.RoleCriteria {
		s.RoleCriteria = append(s.RoleCriteria, localapi.RoleCriterion{Name: c.Name, Held: c.Held, Detail: c.Detail})
	}
	if !st.RoleChangedAt.IsZero() {
		at := st.RoleChangedAt
		s.RoleChangedAt = &at
	}
	for _, a := range st.Host.Addrs() {
		s.Addrs = append(s.Addrs, a.String())
	}
	if st.Client != nil {
		a, ok := st.Client.Attachment()
		s.Failovers = a.Failovers
		if ok {
			s.Attachment = &localapi.Attachment{Supernode: a.Supernode.String(), Since: a.Since, Home: a.Home}
		}
	}
	if st.Sems != nil && st.Serving {
		for _, sem := range st.Sems.All() {
			ss := sem.Stats()
			s.Semaphores = append(s.Semaphores, localapi.Semaphore{Name: ss.Name, InUse: ss.InUse, Max: ss.Max, Acquired: ss.Acquired, Refused: ss.Refused})
		}
	}
	if st.Admission != nil {
		s.AttachedClients = st.Admission.Load()
	}
	if st.Router != nil {
		if o, ok := st.Router.Offline(); ok {
			s.OfflineStore = &localapi.OfflineStore{Messages: o.Messages, Recipients: o.Recipients, Bytes: o.Bytes, MaxBytes: o.MaxBytes}
		}
		if l, ok := st.Router.NoLoss(); ok {
			s.NoLoss = &localapi.NoLoss{
				ReplayGroups: l.ReplayGroups, ReplayMessages: l.ReplayEntries, ReplayBytes: l.ReplayBytes,
				ResumesDone: l.ReplaysDone, ResumesWithGap: l.ReplaysGap, FramesReplayed: l.Replayed,
				ReplicasHeld: l.ReplicasHeld, ReplicationTimeouts: l.ReplicationTimeouts,
				OfflineStored: l.OfflineStored, OfflineForwarded: l.OfflineDelivered, OfflineAcked: l.OfflineDeleted,
				OfflineExpired: l.OfflineExpired, OfflineRefused: l.OfflineRefused,
			}
		}
	}
	if c := st.Mega; c != nil {
		s.Role = "mega"
		s.RoleReason = fmt.Sprintf("operator certificate %d, capacity %d, until %s", c.Serial, c.Capacity, c.NotAfter.UTC().Format(time.RFC3339))
		s.Capacity = int(c.Capacity)
		s.Mega = &localapi.MegaCert{Serial: c.Serial, Capacity: c.Capacity, NotBefore: c.NotBefore, NotAfter: c.NotAfter}
	}
	return s
}

// Peers lists h's connected peers, sorted by ID: which are supernodes of
// snap, which are attached to this node (adm, nil on a node without the
// supernode role).
func Peers(h host.Host, snap *directory.Snapshot, adm *supernode.Admission) []localapi.Peer {
	attached := map[peer.ID]time.Time{}
	if adm != nil {
		for _, si := range adm.Sessions() {
			attached[si.Peer] = si.Since
		}
	}
	out := []localapi.Peer{}
	for _, id := range h.Network().Peers() {
		p := localapi.Peer{ID: id.String()}
		for _, c := range h.Network().ConnsToPeer(id) {
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

// Supernodes lists the directory snap, sorted by ID as the snapshot is;
// self marks this node's own entry.
func Supernodes(snap *directory.Snapshot, self peer.ID) []localapi.Supernode {
	out := []localapi.Supernode{}
	for _, e := range snap.Entries {
		s := localapi.Supernode{
			ID: e.ID.String(), Role: e.Role.String(), Capacity: e.Capacity, Load: e.Load, Spare: int64(e.Capacity) - int64(e.Load),
			Seq: e.Seq, LastSeen: e.LastSeen, Expires: e.Expires, Self: e.ID == self,
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

// Ring describes the live ring r (nil while there is none).
func Ring(r *ring.Ring) localapi.Ring {
	if r == nil {
		return localapi.Ring{}
	}
	return localapi.Ring{Stats: r.Stats()}
}

// refusals reads every non-zero refusal counter from the node's registry:
// the series named *_refused_total or *_rejected_total, wherever they are
// registered (directory, certificates, client, supernode, relay), so a
// new refusal counter appears in the status without listing it here.
func refusals(reg prometheus.Gatherer) []localapi.Refusal {
	if reg == nil {
		return nil
	}
	mfs, err := reg.Gather()
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
