package node

import (
	"fmt"

	"github.com/overlayd/overlayd/node/tunnel"
)

// Tunnels: the node's tunnel manager (package node/tunnel), which opens
// its streams through a tunnel.RelayDialer over the node's Locate; the
// routes are package node/api's.

func (n *Node) startTunnels() error {
	cfg := tunnel.Config{Window: n.cfg.TunnelWindow, IdleTimeout: n.cfg.TunnelIdleTimeout}
	if n.cfg.TunnelMaxConns > 0 {
		cfg.MaxConns = n.cfg.TunnelMaxConns
		cfg.MaxConnsPerService = min(64, n.cfg.TunnelMaxConns)
		cfg.MaxConnsPerConnect = min(64, n.cfg.TunnelMaxConns)
	}
	m, err := tunnel.New(n.host, cfg, tunnel.WithLogger(n.base), tunnel.WithRegisterer(n.reg),
		tunnel.WithClock(n.now), tunnel.WithDialer(tunnel.RelayDialer{Host: n.host, Locator: n, Log: n.log}))
	if err != nil {
		return fmt.Errorf("tunnels: %w", err)
	}
	n.tunnels = m
	m.Start()
	return nil
}

// Tunnels returns the node's tunnel manager (nil before Start).
func (n *Node) Tunnels() *tunnel.Manager { return n.tunnels }
