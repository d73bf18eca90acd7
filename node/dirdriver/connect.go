package dirdriver

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// bootstrapLoop keeps the node connected to at least one bootstrap peer,
// retrying with jittered exponential backoff while none is connected.
func (d *Driver) bootstrapLoop(ctx context.Context) {
	if len(d.cfg.Bootstrap) == 0 {
		return
	}
	h := d.cfg.Host
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	wait := 250 * time.Millisecond
	for {
		connected := 0
		for _, pi := range d.cfg.Bootstrap {
			if h.Network().Connectedness(pi.ID) == network.Connected {
				connected++
			}
		}
		// An ordinary node needs one bootstrap peer; a supernode keeps all
		// of them, so that two halves of a healed partition find each other
		// again (the supernode tier is a full mesh anyway).
		if connected == 0 || (d.cfg.Serving() && connected < len(d.cfg.Bootstrap)) {
			for _, pi := range d.cfg.Bootstrap {
				if pi.ID == h.ID() || h.Network().Connectedness(pi.ID) == network.Connected {
					continue
				}
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err := h.Connect(dctx, pi)
				cancel()
				if err == nil {
					connected++
					d.log.Info("bootstrap connected", "peer", pi.ID.ShortString())
				} else if !errors.Is(err, context.Canceled) {
					d.log.Debug("bootstrap dial", "peer", pi.ID.ShortString(), "err", err)
				}
			}
		}
		if connected > 0 {
			wait = d.cfg.AnnounceInterval
		} else {
			wait = min(2*wait, time.Minute)
		}
		dl := wait/2 + time.Duration(rng.Int64N(int64(wait/2)+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(dl):
		}
	}
}

// meshLoop keeps a supernode connected to every other supernode in its
// directory: the supernode tier is a full mesh, which carries the directory
// gossip (and, later, relayed messages) one hop between any two supernodes.
func (d *Driver) meshLoop(ctx context.Context) {
	h := d.cfg.Host
	changes, cancel := d.cfg.Dir.Subscribe()
	defer cancel()
	t := time.NewTicker(d.cfg.AnnounceInterval)
	defer t.Stop()
	for {
		for _, e := range d.cfg.Dir.Snapshot().Entries {
			if e.ID == h.ID() || h.Network().Connectedness(e.ID) == network.Connected {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := h.Connect(dctx, peer.AddrInfo{ID: e.ID, Addrs: e.Addrs})
			cancel()
			if err != nil && ctx.Err() == nil {
				d.log.Debug("supernode dial", "peer", e.ID.ShortString(), "err", err)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-changes:
		case <-t.C:
		}
	}
}
