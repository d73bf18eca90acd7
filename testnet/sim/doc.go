// Package sim is a deterministic discrete-event simulator of overlayd's
// control plane: a network of ordinary nodes, supernodes and
// mega-supernodes, a scenario (a crash of a share of the supernodes, a
// restart wave) and a policy (overlayd as shipped, the 2010 protocol, or
// overlayd with one protection switched off), run in virtual time by one
// thread, reported as report.json and report.md.
//
// The decisions are the daemon's own code, called with the virtual now:
// the directory (directory.Apply, Expire), the ring and home clusters
// (cluster.Members, ring.New, cluster.Home), the client's failover pass
// (node/client.NewPass and its methods: plan, the mega order, the waits a
// refusal sets, the alternatives followed), its backoff (overlay/backoff),
// its return home (node/client.ReturnTargets, NextReturnDelay) and the
// supernodes' admission (supernode/capacity.Semaphore). The tests compare
// the simulator's decisions with those functions called directly.
//
// What is modelled rather than run is in Params, each field with its
// default and where the default comes from: the network (latency, loss),
// each supernode's CPU as a queue fed by attach attempts, keepalives,
// session work and announcement checks, and overload (sessions time out
// when the queue is longer than the keepalive silence; a supernode without
// an admission limit whose queueing delay stays above FailDelay for
// FailAfter fails). For the in-process testnet (the recovery scenario)
// every node shares one process's CPU instead (Params.ProcessCores), which
// is what BenchmarkValidateRecovery compares with the real testnet. Every
// node sees one shared directory, snapshotted every DirectoryTick.
//
// TimeToFraction is what the capacity planner (testnet/planner, behind
// `overlayd testnet sim plan`) asks of each run: the time after a crash
// until a target fraction of the clients were attached. The
// directory-cost model is not simulated here (testnet/dircost).
// Report.Write draws the figures of plot.go beside report.json. The
// recovery scenario ends with the hand-back (handback.go): the crashed
// supernodes restart and the demoted megas drain on node/role.DrainStep.
// The auto-roles scenario (autoroles.go) runs --role auto: public auto
// nodes evaluate node/role.Decide on the daemon's schedule
// (role.EvalInterval) with the daemon's input (role.NewInput), promote
// into supernode slots added as the run goes, and demote through the same
// drain schedule; its test replays every evaluation through that code.
//
// A seed gives one history: events are ordered by time and then by the
// order they were scheduled, every random draw comes from one PCG source
// seeded from Config.Seed, no map is iterated where order matters, and the
// report holds no wall-clock figure. The same Config gives byte-identical
// report.json.
//
// Scale: the state per client is a few dozen bytes plus, while it fails
// over, its pass and backoff; there is no goroutine per entity and events
// are small values in one heap. A million clients and ten thousand
// supernodes run ten simulated minutes of the skype2010 scenario in about
// 3.8 CPU-minutes and 560 MiB (docs/BENCHMARKS.md).
package sim
