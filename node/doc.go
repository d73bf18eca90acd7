// Package node is the overlayd daemon: it builds the libp2p host from a
// Config, keeps the node's identity, runs the supernode directory over
// GossipSub, keeps the cluster ring in step with the directory, plays the
// configured role, and serves the local control API and metrics.
//
// A Node is built with New (no I/O), started with Start, and stopped with
// Close; Run does all three around a context. cmd/overlayd is a thin layer
// that turns flags, environment and the config file into a Config.
package node
