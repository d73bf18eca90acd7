package trust

import (
	"context"
	"fmt"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"

	"github.com/overlayd/overlayd/overlay/directory"
)

// Run demotes this node when its mega certificate expires or is revoked
// and drops its supernode certificate in the same cases (four times an
// announce interval), re-publishes the revocations submitted here (once
// an interval), and keeps the directory's mega-supernodes on the
// allowlist (on every directory change). It also reads the revocation
// topic's subscription, if JoinRevocations joined it, in a goroutine it
// waits for. It returns when ctx ends.
func (k *Keeper) Run(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	if k.sub != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer k.sub.Cancel()
			for {
				if _, err := k.sub.Next(ctx); err != nil {
					return
				}
			}
		}()
	}
	changes, cancel := k.cfg.Directory.Subscribe()
	defer cancel()
	t := time.NewTicker(max(k.cfg.Interval/4, 50*time.Millisecond))
	defer t.Stop()
	repub := time.NewTicker(k.cfg.Interval)
	defer repub.Stop()
	allowed := map[string]bool{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-changes:
			k.allowMegas(allowed)
		case <-repub.C:
			if k.publish != nil {
				k.republish(ctx)
			}
		case <-t.C:
			k.check(ctx)
		}
	}
}

// allowMegas puts the verified mega-supernodes' addresses on the
// allowlist, so a saturated node still accepts their connections; allowed
// holds the addresses already there.
func (k *Keeper) allowMegas(allowed map[string]bool) {
	if k.cfg.Allowlist == nil {
		return
	}
	for _, m := range megaAddrs(k.cfg.Directory.Snapshot()) {
		if allowed[m.String()] {
			continue
		}
		if k.cfg.Allowlist.Add(m) == nil {
			allowed[m.String()] = true
		}
	}
}

// megaAddrs are the allowlist entries of the verified mega-supernodes of
// snap: /ip4|ip6/<address>/p2p/<peer> for each IP address they announce.
func megaAddrs(snap *directory.Snapshot) []ma.Multiaddr {
	var out []ma.Multiaddr
	for _, e := range snap.Entries {
		if e.Cert == nil {
			continue
		}
		for _, a := range e.Addrs {
			ip, err := manet.ToIP(a)
			if err != nil {
				continue
			}
			proto := "ip4"
			if ip.To4() == nil {
				proto = "ip6"
			}
			m, err := ma.NewMultiaddr(fmt.Sprintf("/%s/%s/p2p/%s", proto, ip, e.ID))
			if err != nil {
				continue
			}
			out = append(out, m)
		}
	}
	return out
}
