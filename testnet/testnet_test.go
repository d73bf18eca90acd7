package testnet

import (
	"context"
	"testing"
	"time"
)

func TestDefaultNetworkConverges(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Supernodes, cfg.Clients, cfg.Megas = 3, 5, 0
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	if err := n.WaitConverged(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if err := n.WaitAttached(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if got := len(n.All()); got != cfg.Supernodes+cfg.Clients {
		t.Fatalf("%d nodes, want %d", got, cfg.Supernodes+cfg.Clients)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{
		{Supernodes: 0, Clients: 1, Capacity: 1, AnnounceInterval: time.Second},
		{Supernodes: 1, Clients: -1, Capacity: 1, AnnounceInterval: time.Second},
		{Supernodes: 1, Clients: 1, Capacity: 0, AnnounceInterval: time.Second},
		{Supernodes: 1, Clients: 1, Capacity: 1, AnnounceInterval: time.Millisecond},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}
