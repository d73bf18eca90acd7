package testnet

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/overlayd/overlayd/node"
	"github.com/overlayd/overlayd/protocol"
)

// KillSupernodes crashes a fraction of the running regular supernodes at
// once (no departure announcement; their clients find out by silence) and
// returns their names. The first supernode, everyone's bootstrap peer, is
// never killed; with Config.SpareHome, neither is the group's home.
func (n *Network) KillSupernodes(frac float64) []string {
	spare := ""
	if n.cfg.SpareHome {
		if h := n.groupHome(); h != nil {
			spare = n.Name(h)
		}
	}
	var cands []*member
	for _, m := range n.membersOf(KindSupernode, true) {
		if m.name != "sn0" && m.name != spare {
			cands = append(cands, m)
		}
	}
	k := min(len(cands), max(1, int(math.Round(frac*float64(len(cands)+1)))))
	var victims []*member
	for _, i := range n.pick(k, len(cands)) {
		victims = append(victims, cands[i])
	}
	return n.stop(victims, true)
}

// stop stops the nodes of ms concurrently, abruptly or gracefully.
func (n *Network) stop(ms []*member, abrupt bool) []string {
	var names []string
	var wg sync.WaitGroup
	for _, m := range ms {
		n.mu.Lock()
		nd, lis := m.node, m.lis
		m.node, m.lis = nil, nil
		m.refusedBase += m.lastRefused
		m.lastRefused = 0
		n.mu.Unlock()
		if nd == nil {
			continue
		}
		names = append(names, m.name)
		wg.Go(func() {
			if lis != nil {
				lis.Close()
			}
			if abrupt {
				_ = nd.CloseAbruptlyForTest()
			} else {
				_ = nd.Close()
			}
		})
	}
	wg.Wait()
	return names
}

// Crash stops the running node nd at once, as a crash would (no departure
// announcement), and marks its slot down; RestartSupernode or
// RestartSupernodes start a supernode's slot again.
func (n *Network) Crash(nd *node.Node) error {
	n.mu.Lock()
	var m *member
	for _, x := range n.members {
		if x.node == nd {
			m = x
		}
	}
	n.mu.Unlock()
	if m == nil {
		return errors.New("testnet: crash: not a running node of this network")
	}
	n.stop([]*member{m}, true)
	return nil
}

// RestartSupernode starts regular supernode slot i (sn<i>) again with its
// identity; the slot must be down.
func (n *Network) RestartSupernode(ctx context.Context, i int) (*node.Node, error) {
	for _, m := range n.membersOf(KindSupernode, false) {
		if m.index == i {
			if err := n.startMember(ctx, m, nil); err != nil {
				return nil, err
			}
			n.mu.Lock()
			defer n.mu.Unlock()
			return m.node, nil
		}
	}
	return nil, fmt.Errorf("testnet: restart sn%d: no such stopped supernode", i)
}

// RestartSupernodes starts every stopped supernode again with its identity.
func (n *Network) RestartSupernodes(ctx context.Context) ([]string, error) {
	var names []string
	var errs []error
	for _, m := range n.membersOf(KindSupernode, false) {
		if err := n.startMember(ctx, m, nil); err != nil {
			errs = append(errs, err)
			continue
		}
		names = append(names, m.name)
	}
	return names, errors.Join(errs...)
}

// AddClients starts k new clients.
func (n *Network) AddClients(ctx context.Context, k int) error {
	_, err := n.StartClients(ctx, k, nil)
	return err
}

// StartClients starts count new clients, Config.StartParallel at a time,
// numbered after the existing ones, and returns them in order (nil where
// a start failed, with the errors joined). keys[i], where given and not
// nil, is the identity of the i-th new client. It does not wait for them
// to attach.
func (n *Network) StartClients(ctx context.Context, count int, keys []crypto.PrivKey) ([]*node.Node, error) {
	n.mu.Lock()
	first := 0
	for _, m := range n.members {
		if m.kind == KindClient {
			first++
		}
	}
	n.mu.Unlock()
	return n.startClients(ctx, first, count, keys, nil)
}

// WaitRings waits until the ring of every running supernode holds every
// running supernode (megas included), polling every 20 ms.
func (n *Network) WaitRings(ctx context.Context) error {
	var want, short int
	err := poll(ctx, 20*time.Millisecond, func() bool {
		sns := n.Supernodes()
		want, short = len(sns), 0
		for _, sn := range sns {
			if r := sn.Ring(); r == nil || r.Len() != want {
				short++
			}
		}
		return short == 0
	})
	if err != nil {
		return fmt.Errorf("%d of %d supernode rings do not hold all %d supernodes: %w", short, want, want, err)
	}
	return nil
}

// Registry returns the Prometheus registry of a running node of the
// network, or nil without Config.Registries.
func (n *Network) Registry(nd *node.Node) *prometheus.Registry {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, m := range n.members {
		if m.node == nd {
			return m.reg
		}
	}
	return nil
}

// RemoveClients stops k running clients chosen by the seed, gracefully,
// and returns their names.
func (n *Network) RemoveClients(k int) []string {
	live := n.membersOf(KindClient, true)
	k = min(k, len(live))
	var victims []*member
	for _, i := range n.pick(k, len(live)) {
		victims = append(victims, live[i])
	}
	return n.stop(victims, false)
}

// Storm makes every client drop its session and reconnect in the same
// instant: each stops (detaching), restarts with its identity and waits
// at a gate, and the gate opens once all are up. It returns the moment
// the gate opened.
func (n *Network) Storm(ctx context.Context) (time.Time, error) {
	live := n.membersOf(KindClient, true)
	n.stop(live, false)
	restart := time.Now()
	gate := make(chan struct{})
	errs := make([]error, len(live))
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, m := range live {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs[i] = n.startMember(ctx, m, gate)
		})
	}
	wg.Wait()
	// Every client has its ring and waits at the gate before it opens:
	// else each first pass waits for its own directory, and the crowd
	// arrives spread over the directory's arrival, jitter or not.
	ready := func() bool { return n.attempts.readySince(restart) >= len(live) }
	waitCtx, cancel := context.WithTimeout(ctx, 2*(n.cfg.AnnounceInterval+time.Second)+10*time.Second)
	err := poll(waitCtx, 5*time.Millisecond, ready)
	cancel()
	opened := time.Now()
	close(gate)
	if err != nil && ctx.Err() == nil {
		err = nil // the clients' own ring wait gives up too: a spread wave, not an error
	}
	return opened, errors.Join(append(errs, err)...)
}

// PromoteMegas gives every mega-supernode an operator certificate of
// MegaCapacity, valid for an hour, and returns their names.
func (n *Network) PromoteMegas(ctx context.Context) ([]string, error) {
	var names []string
	var errs []error
	for _, m := range n.membersOf(KindMega, true) {
		n.mu.Lock()
		n.serial++
		serial := n.serial
		n.mu.Unlock()
		raw, err := n.MegaCert(m.node, n.cfg.MegaCapacity, serial)
		if err == nil {
			_, err = m.node.Promote(ctx, raw)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("promote %s: %w", m.name, err))
			continue
		}
		names = append(names, m.name)
	}
	return names, errors.Join(errs...)
}

// MegaCert returns an operator certificate for nd of the given capacity
// and serial number, valid from a minute ago for an hour.
func (n *Network) MegaCert(nd *node.Node, capacity int, serial uint64) ([]byte, error) {
	now := time.Now()
	return protocol.SealMegaCert(protocol.MegaCert{Subject: nd.ID(), Capacity: uint32(capacity),
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour), Serial: serial}, n.op)
}

// DemoteMegas returns the megas to regular supernodes; they hand their
// clients back over DrainPeriod.
func (n *Network) DemoteMegas(ctx context.Context) ([]string, error) {
	var names []string
	var errs []error
	for _, m := range n.membersOf(KindMega, true) {
		if _, ok := m.node.MegaCert(); !ok {
			continue
		}
		if err := m.node.Demote(ctx, "testnet: the regular supernodes are back"); err != nil {
			errs = append(errs, fmt.Errorf("demote %s: %w", m.name, err))
			continue
		}
		names = append(names, m.name)
	}
	return names, errors.Join(errs...)
}

// Partition splits the network in two: the first half of the supernodes,
// megas and clients on one side, the rest on the other. Connections across
// are closed and refused until Heal.
func (n *Network) Partition() {
	n.gate.set(true)
	for _, nd := range n.All() {
		for _, p := range nd.Host().Network().Peers() {
			if !n.gate.allowed(nd.ID(), p) {
				_ = nd.Host().Network().ClosePeer(p)
			}
		}
	}
}

// Heal ends the partition.
func (n *Network) Heal() { n.gate.set(false) }

// Side returns the partition side of a node.
func (n *Network) Side(nd *node.Node) int { return n.gate.side(nd.ID()) }
