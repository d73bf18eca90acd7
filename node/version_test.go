package node

import (
	"context"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/config"
	"github.com/overlayd/overlayd/node/version"
)

// TestNodeAgentVersion checks that a node announces overlayd/<version>
// through identify: another node that connects to it learns it.
func TestNodeAgentVersion(t *testing.T) {
	a := startNode(t, testConfig(t, config.RoleOrdinary))
	b := startNode(t, testConfig(t, config.RoleOrdinary))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.Host().Connect(ctx, peer.AddrInfo{ID: a.ID(), Addrs: a.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	want := version.Build().UserAgent()
	var got any
	waitFor(t, 10*time.Second, "identify of a", func() bool {
		got, _ = b.Host().Peerstore().Get(a.ID(), "AgentVersion")
		return got == want
	})
	if st := a.Status(); st.Version != version.Build().Version {
		t.Errorf("status version %q, want %q", st.Version, version.Build().Version)
	}
}
