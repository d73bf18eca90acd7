// Package role is the pure core of --role auto: whether an auto node
// should promote itself to supernode, demote itself, or stay as it is.
//
// Decide is a function of the node's state, the directory, the previous
// decision State, the time (Input.Now) and an injected random source. It
// does no I/O, starts nothing and keeps nothing between calls but the State
// it returns; the driver, package node/roledriver, gathers the Input,
// calls Decide and carries out what it decides.
//
// # Rules
//
// The rules (docs/ARCHITECTURE.md, "Roles"), with R = Policy.ClusterSize,
// which the daemon sets to cluster.Size
// (github.com/overlayd/overlayd/overlay/cluster):
//
//   - An ordinary auto node promotes when all of these hold continuously
//     for a delay drawn once, when they start holding, uniformly from
//     [PromoteDelayMin, PromoteDelayMax]:
//     reachable (public reachability), up at least MinUptime, capacity at
//     least MinCapacity, and the network needs supernodes: the spare
//     capacity of the regular supernodes per attached client is below
//     SpareLow, or this node's home cluster is under-served (fewer than R
//     members, or every member at HomeHighLoad or more while the spare per
//     client is below (SpareLow+SpareHigh)/2).
//     A criterion that stops holding cancels the wait; the next one draws
//     a new delay. N eligible nodes thus promote spread over the window,
//     and each promotion raises the spare capacity the others see, so
//     most of them stop waiting.
//   - A serving auto node demotes when it lost reachability (private)
//     for a delay drawn from the promotion window, or when the network
//     has a surplus for a delay drawn from [DemoteAfter, 2×DemoteAfter]:
//     spare per client above SpareHigh, and without this node's capacity
//     the spare per client would still be above SpareLow, at least R
//     regular supernodes would remain, and its own home cluster (without
//     it) would not be under-served. So a node demotes only into a state
//     in which it would not promote again.
//
// SpareLow < SpareHigh and the "still above SpareLow without me" check are
// the hysteresis: a load oscillating around either mark does not make a
// node flap, and a promotion never by itself creates the surplus that
// would demote it.
//
// Mega-supernodes are a temporary tier that hands its clients back: their
// clients count towards the load, their room does not count as spare, and
// they are not home cluster members.
package role
