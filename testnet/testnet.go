package testnet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node"
)

// Config sizes a network.
type Config struct {
	Supernodes int
	Clients    int
	// Capacity of each supernode.
	Capacity int
	// AnnounceInterval of every node; short intervals make a fast demo.
	AnnounceInterval time.Duration
	// Seed drives every random choice of the network's schedule.
	Seed uint64
	// Logger receives the nodes' logs (default: discarded).
	Logger *slog.Logger
}

// DefaultConfig is the small network of the README's quick start.
func DefaultConfig() Config {
	return Config{Supernodes: 3, Clients: 5, Capacity: 50, AnnounceInterval: time.Second, Seed: 1}
}

// Validate checks the sizes.
func (c Config) Validate() error {
	switch {
	case c.Supernodes < 1:
		return fmt.Errorf("testnet: --supernodes %d: need at least 1", c.Supernodes)
	case c.Clients < 0:
		return fmt.Errorf("testnet: --clients %d: must not be negative", c.Clients)
	case c.Supernodes+c.Clients > 2000:
		return fmt.Errorf("testnet: %d nodes: at most 2000 fit one process on this class of machine", c.Supernodes+c.Clients)
	case c.Capacity < 1:
		return fmt.Errorf("testnet: --capacity %d: need at least 1", c.Capacity)
	case c.AnnounceInterval < 50*time.Millisecond:
		return fmt.Errorf("testnet: --interval %v: at least 50ms", c.AnnounceInterval)
	}
	return nil
}

// Network is a running in-process network.
type Network struct {
	cfg  Config
	dir  string
	rng  *rand.Rand
	log  *slog.Logger
	boot string

	mu         sync.Mutex
	supernodes []*node.Node
	clients    []*node.Node
	closed     bool
}

// Start starts the supernodes, then the clients, all bootstrapping through
// the first supernode. On error it closes what it started.
func Start(ctx context.Context, cfg Config) (*Network, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "overlayd-testnet-")
	if err != nil {
		return nil, err
	}
	n := &Network{cfg: cfg, dir: dir, rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)), log: cfg.Logger}
	if n.log == nil {
		n.log = slog.New(slog.DiscardHandler)
	}
	for i := range cfg.Supernodes {
		nd, err := n.startNode(ctx, node.RoleSupernode, fmt.Sprintf("sn%d", i))
		if err != nil {
			n.Close()
			return nil, err
		}
		n.supernodes = append(n.supernodes, nd)
		if i == 0 {
			n.boot = fmt.Sprintf("%s/p2p/%s", nd.Host().Addrs()[0], nd.ID())
		}
	}
	for i := range cfg.Clients {
		nd, err := n.startNode(ctx, node.RoleOrdinary, fmt.Sprintf("c%d", i))
		if err != nil {
			n.Close()
			return nil, err
		}
		n.clients = append(n.clients, nd)
	}
	return n, nil
}

func (n *Network) startNode(ctx context.Context, role node.Role, name string) (*node.Node, error) {
	c := node.DefaultConfig()
	c.DataDir = filepath.Join(n.dir, name)
	c.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	c.Role = role
	c.Capacity = n.cfg.Capacity
	c.AnnounceInterval = n.cfg.AnnounceInterval
	c.APIListen = node.APIOff
	if n.boot != "" {
		c.Bootstrap = []string{n.boot}
	}
	nd, err := node.New(c, node.WithLogger(n.log.With("node", name)))
	if err != nil {
		return nil, err
	}
	if err := nd.Start(ctx); err != nil {
		nd.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return nd, nil
}

// Seed returns the network's seed.
func (n *Network) Seed() uint64 { return n.cfg.Seed }

// Supernodes returns the supernodes, stopped ones included.
func (n *Network) Supernodes() []*node.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*node.Node(nil), n.supernodes...)
}

// Clients returns the ordinary nodes.
func (n *Network) Clients() []*node.Node {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]*node.Node(nil), n.clients...)
}

// All returns every node, supernodes first.
func (n *Network) All() []*node.Node { return append(n.Supernodes(), n.Clients()...) }

// Converged reports whether every node's directory holds exactly the given
// supernodes.
func Converged(nodes []*node.Node, supers []peer.ID) bool {
	for _, nd := range nodes {
		s := nd.Directory().Snapshot()
		if s.Len() != len(supers) {
			return false
		}
		for _, id := range supers {
			if _, ok := s.Get(id); !ok {
				return false
			}
		}
	}
	return true
}

// WaitConverged waits until every node's directory lists every supernode
// and every node's ring has the same version, calling progress (if not nil)
// with the number of complete directories whenever it changes.
func (n *Network) WaitConverged(ctx context.Context, progress func(complete, total int)) error {
	var ids []peer.ID
	for _, s := range n.Supernodes() {
		ids = append(ids, s.ID())
	}
	all := n.All()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		complete := 0
		for _, nd := range all {
			if Converged([]*node.Node{nd}, ids) {
				complete++
			}
		}
		if progress != nil && complete != last {
			progress(complete, len(all))
			last = complete
		}
		if complete == len(all) && ringsAgree(all, len(ids)) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("network did not converge: %d of %d directories complete: %w", complete, len(all), ctx.Err())
		case <-tick.C:
		}
	}
}

func ringsAgree(all []*node.Node, members int) bool {
	var v string
	for _, nd := range all {
		r := nd.Ring()
		if r == nil || r.Len() != members {
			return false
		}
		if v == "" {
			v = r.Version()
		} else if r.Version() != v {
			return false
		}
	}
	return true
}

// Close stops every node and removes the network's files.
func (n *Network) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	nodes := append(append([]*node.Node(nil), n.clients...), n.supernodes...)
	n.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, nd := range nodes {
		wg.Go(func() { errs[i] = nd.Close() })
	}
	wg.Wait()
	errs = append(errs, os.RemoveAll(n.dir))
	return errors.Join(errs...)
}

// WaitAttached waits until every ordinary node is attached to a supernode,
// calling progress (if not nil) when the count changes.
func (n *Network) WaitAttached(ctx context.Context, progress func(attached, total int)) error {
	clients := n.Clients()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := -1
	for {
		attached := 0
		for _, c := range clients {
			if c.Status().Attachment != nil {
				attached++
			}
		}
		if progress != nil && attached != last {
			progress(attached, len(clients))
			last = attached
		}
		if attached == len(clients) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d clients attached: %w", attached, len(clients), ctx.Err())
		case <-tick.C:
		}
	}
}
