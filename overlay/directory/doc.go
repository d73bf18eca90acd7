// Package directory keeps the live set of supernodes that a node knows from
// signed announcements (see package protocol for the rules).
//
// A Directory is a pure state machine driven by its owner: Receive or Apply
// for each announcement, Expire on a timer, both with the current time as an
// argument. Readers take an immutable Snapshot without locking, and
// Subscribe to be told (coalesced) that the snapshot changed.
package directory
