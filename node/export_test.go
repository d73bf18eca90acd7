package node

import (
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// rejectedForTest returns how many announcements were refused for reason.
func (n *Node) rejectedForTest(reason string) float64 {
	return testutil.ToFloat64(n.m.rejected.WithLabelValues(reason))
}

// attachmentForTest returns the client's current supernode ("" if none).
func (n *Node) attachmentForTest() peer.ID {
	if n.attacher == nil {
		return ""
	}
	a, ok := n.attacher.Attachment()
	if !ok {
		return ""
	}
	return a.Supernode
}

func (n *Node) attemptsForTest(result string) float64 {
	return testutil.ToFloat64(n.m.attempts.WithLabelValues(result))
}

func testutilDead(n *Node) float64 { return testutil.ToFloat64(n.m.deadSupernodes) }

func newIDForTest(t *testing.T) peer.ID {
	t.Helper()
	_, id := newKey(t)
	return id
}
