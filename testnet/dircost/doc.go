// Package dircost is the directory-cost model behind `overlayd testnet
// sim dircost` (issue 21's point 5): what the supernode directory costs
// each ordinary node and each supernode, in bytes received a second and
// signature checks a second, under today's design (every node on the
// announcement topic) and the view design (the topic among supernodes
// only, ordinary nodes on partial views, overlay/view). Compute gives one
// Row per tier size and design; Markdown and RefreshMarkdown render them.
//
// Its parts, each from one seed: the announcement stream (announceRate,
// events on the daemon's schedule); one announcement's gossip through the
// tier (meanCopies, events: GossipSub's forwarding over the design's
// mesh); the IHAVE gossip (ihaveBps, computed); and the view clients
// (viewClients, events: view.Build over a real directory of real signed
// messages, sized by proto.Size). Framing is stated at frameOverhead.
// The events run on a small queue of the package's own (events.go),
// ordered by virtual time and then scheduling order.
//
// What it must not do: use the control-plane simulator (testnet/sim) or
// the in-process testnet (the testnet package sets its measurements beside
// this model, not the other way round), start hosts or goroutines, or read
// the wall clock: virtual time starts at a fixed epoch, every random draw
// comes from Params.Seed, and the same Params give the same rows. Only its
// tests run real GossipSub (on mocknet) to check the model's arithmetic.
package dircost
