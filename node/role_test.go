package node

import "github.com/overlayd/overlayd/node/role"

// The rules of --role auto are tested in package node/role. These are the
// criterion names under the node-level names they had before that package
// existed, kept only because role_net_test.go (outside the role move) still
// uses them; once it says role.CritReachable and so on, delete them.
const (
	CritReachable = role.CritReachable
	CritNeeded    = role.CritNeeded
	CritSurplus   = role.CritSurplus
)
