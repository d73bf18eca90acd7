// Package supernode is the supernode role: what a peer does when it carries
// the network for others. It announces itself to the directory, and (in
// later packages below it) admits attachments under capacity semaphores,
// relays messages and fans group messages out.
//
// Like overlay, it never reads the clock itself: the driver in package node
// passes the time in.
package supernode
