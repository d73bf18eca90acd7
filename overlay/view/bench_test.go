package view

import (
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	"github.com/overlayd/overlayd/overlay/cluster"
	"github.com/overlayd/overlayd/overlay/directory"
	"github.com/overlayd/overlayd/overlay/ring"
	"github.com/overlayd/overlayd/protocol"
)

// BenchmarkViewBuild: what a view server spends on one full view (a
// client's key, spares, megas) from a directory of n supernodes:
// "indexed" reuses the index of the snapshot, as supernode.ViewServer
// does (rebuilt at most once a second); "naive" indexes the snapshot for
// every request (view.Build), which is a pass over the directory.
//
//	go test -run '^$' -bench ViewBuild -count 6 ./overlay/view | benchstat -col /build -
func BenchmarkViewBuild(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		if testing.Short() && n > 1_000 {
			continue
		}
		r, s := benchDirectory(b, n)
		rng := mrand.New(mrand.NewPCG(1, 1))
		key := []byte("a client's key, any 34 bytes long.")
		b.Run(fmt.Sprintf("supernodes=%d/build=indexed", n), func(b *testing.B) {
			ix := NewIndex(r, s)
			for b.Loop() {
				ix.Build(s, [][]byte{key}, nil, false, rng)
			}
		})
		b.Run(fmt.Sprintf("supernodes=%d/build=naive", n), func(b *testing.B) {
			for b.Loop() {
				Build(r, s, [][]byte{key}, nil, false, rng)
			}
		})
	}
}

// benchDirectory is a directory of n supernodes (stand-in signed
// messages: Build does not open them) and its ring.
func benchDirectory(b *testing.B, n int) (*ring.Ring, *directory.Snapshot) {
	b.Helper()
	d := directory.New(directory.WithMaxEntries(2 * n))
	now := time.Unix(1_800_000_000, 0)
	for i := range n {
		sn := newSupernode(b, uint32(50+i%400), i)
		a := protocol.Announcement{ID: sn.id, Addrs: []ma.Multiaddr{ma.StringCast(fmt.Sprintf("/ip4/10.%d.%d.%d/tcp/4001", i>>16&255, i>>8&255, i&255))},
			Role: protocol.RoleSupernode, Capacity: sn.cap, Load: sn.load, Version: protocol.Version, Seq: 1, Interval: 10 * time.Second}
		data, err := a.Marshal()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := d.Receive(sn.id, data, []byte{1}, now); err != nil {
			b.Fatal(err)
		}
	}
	s := d.Snapshot()
	r, err := ring.New(cluster.Members(s, now, cluster.Policy{}))
	if err != nil {
		b.Fatal(err)
	}
	return r, s
}
