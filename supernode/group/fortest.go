package group

import "time"

// HomeView is a snapshot of a home record, for tests.
type HomeView struct {
	Epoch, Seq    uint64
	At            map[string]string // member → its supernode
	Syncing, Away bool
}

// HomeForTest returns a snapshot of this supernode's home record of g.
func (c *Core) HomeForTest(g string) (HomeView, bool) {
	hg := c.homes[g]
	if hg == nil {
		return HomeView{}, false
	}
	at := make(map[string]string, len(hg.at))
	for m, sn := range hg.at {
		at[m] = sn
	}
	return HomeView{Epoch: hg.epoch, Seq: hg.seq, At: at, Syncing: hg.syncing, Away: hg.away}, true
}

// HeldForTest reports whether member is held out of g's local fanout.
func (c *Core) HeldForTest(member, g string) bool {
	_, ok := c.resuming[member][g]
	return ok
}

// HoldForTest holds member out of g's fanout as if its resume had gone to
// home, until the time given.
func (c *Core) HoldForTest(member, g, home string, until time.Time) {
	if c.resuming[member] == nil {
		c.resuming[member] = map[string]*heldResume{}
	}
	c.resuming[member][g] = &heldResume{home: home, until: until}
	c.leaveLocal(g, member, false)
}

// ReplaysForTest is the number of replays under way at this home.
func (c *Core) ReplaysForTest() int { return len(c.replays) }

// LocalForTest is the number of g's members in this supernode's local
// fanout.
func (c *Core) LocalForTest(g string) int { return len(c.local[g]) }

// SetReplayBudgetForTest sets the frames all replays send per tick
// (ReplayFramesPerTick by default): benchmarks compare unpaced replay.
func (c *Core) SetReplayBudgetForTest(n int) { c.replayBudget = n }

// ToldHomeForTest reports whether this supernode takes g's frames from p
// as a home it told its members to.
func (c *Core) ToldHomeForTest(now time.Time, g, p string) bool { return c.toldHome(now, g, p) }

// JoinedForTest reports whether client joined g at this supernode.
func (c *Core) JoinedForTest(client, g string) bool {
	_, ok := c.joined[client][g]
	return ok
}

// SetPerMemberFanoutForTest switches the naive design (one frame per
// member) on or off: benchmarks compare both on one network.
func (c *Core) SetPerMemberFanoutForTest(on bool) { c.cfg.PerMemberFanout = on }
