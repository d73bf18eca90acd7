// Package groupsim is a deterministic discrete-event simulator of the group
// data plane: one real [group.Core] per supernode, driven over simulated
// links, rings that disagree for a while, a replay log with the store's
// write-behind, clients that decide with overlay/member (dedup, the
// position they resume from) and retry as node/client does,
// and faults (crashes, double crashes in a home cluster, ring flaps, slow
// ring convergence, duplicated frames, failed appends, forged publishes and
// membership claims). A checker holds the run to the written guarantee: an
// acknowledged publish reaches every member joined throughout exactly once,
// in order, unless the member was told of a gap. A supernode refuses a
// link's new stream while its view lacks the sender, as the shell's relay
// handler does, and what is in flight on it is lost.
//
// Partitions (FaultPartition: one or two supernodes cut off from the
// others, frames across lost, each side's directory dropping the other's
// supernodes, then a heal) are modelled but off by default (rate 0;
// `--fault partition=0.3` turns them on): the core does not yet keep the
// guarantee across them (docs/ARCHITECTURE.md, "Partitions").
// FaultReconnectLoss (off by default) loses, after a heal, the first frame
// on each link across: written into the dead connection with no error.
//
// Everything runs on one goroutine from one seeded PCG: the same seed gives
// the same history, byte for byte (Result.TraceHash). [Seeds] runs many
// seeds, one goroutine each, for `overlayd testnet sim --scenario groups`
// and the tests; Params.Mutations switch off the core's fixes one at a time.
package groupsim
