// Package testnet starts overlayd networks for tests, demos and scenarios:
// real libp2p hosts on 127.0.0.1 in one process, each a full node.Node, with
// controls to stop and crash nodes and to wait for the network to converge.
// Every network has a seed, printed by the runner, so that a schedule can be
// replayed.
//
// It holds the harness (Start, Network, Config) and the scenarios run on it
// (RunScenario: the schedule of kills, partitions, storms and hand-backs,
// their criteria and samples). What a run leaves behind, report.json, the
// plots and report.md, is testnet/report's: testnet fills a report.Report
// and must not draw or format it itself.
package testnet
