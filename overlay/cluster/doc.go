// Package cluster holds the rules that clients and supernodes must agree on
// about home clusters: the cluster size R, how an announced capacity becomes
// ring weight, which directory entries are ring members, the home cluster of
// a key, and the spare-capacity-weighted choice of supernodes that spreads
// refused clients.
//
// Both sides of every protocol import it (node/client plans attach passes
// with it; supernode finds presence homes and BUSY alternatives with it), so
// a rule changed here changes on both sides at once. It is pure: no
// goroutines, no clock, randomness passed in.
package cluster
