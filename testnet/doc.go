// Package testnet starts overlayd networks for tests, demos and scenarios:
// real libp2p hosts on 127.0.0.1 in one process, each a full node.Node, with
// controls to stop and crash nodes and to wait for the network to converge.
// Every network has a seed, printed by the runner, so that a schedule can be
// replayed.
//
// It holds the harness (Start, Network, Config) and the controls and
// measurements scenarios are made of (kills, restarts, storms,
// promotions, partitions, publishers and their losses, Sample). The named
// scenarios and their criteria are testnet/scenario's; what a run leaves
// behind (report.json, the plots, report.md) is testnet/report's: testnet
// fills a report.Sample and must not draw or format a report itself.
package testnet
