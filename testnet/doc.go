// Package testnet starts overlayd networks for tests, demos and scenarios:
// real libp2p hosts on 127.0.0.1 in one process, each a full node.Node, with
// controls to stop and crash nodes and to wait for the network to converge.
// Every network has a seed, printed by the runner, so that a schedule can be
// replayed.
package testnet
