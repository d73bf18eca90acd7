package node

import (
	"context"
	"slices"
	"time"

	"github.com/overlayd/overlayd/node/datadir"
)

// groupStateEvery is how often the groups file (datadir.GroupsFile) is
// rewritten when it changed (and once at Close): a crash loses at most
// this much progress, which only means a longer replay.
const groupStateEvery = 5 * time.Second

// groupStateLoop rewrites the groups file when the client's groups or
// positions changed, and once more when ctx ends.
func (n *Node) groupStateLoop(ctx context.Context) {
	last := n.client.GroupStates()
	save := func() {
		cur := n.client.GroupStates()
		if slices.Equal(cur, last) {
			return
		}
		if err := datadir.SaveGroups(n.cfg.DataDir, cur); err != nil {
			n.log.Warn("saving the joined groups failed", "err", err)
			return
		}
		last = cur
	}
	t := time.NewTicker(groupStateEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			save()
			return
		case <-t.C:
			save()
		}
	}
}
