package api

import "errors"

// ErrNotSupernode is what Operator.Promote returns (wrapped or not) on a
// node that does not run the supernode role; the API answers it 409.
var ErrNotSupernode = errors.New("this node is not a supernode: start it with --role supernode to make it promotable")

// errNoClient answers messaging requests on a pinned supernode, which has
// no client side (it relays messages; it does not send or receive them).
var errNoClient = errors.New("only ordinary and auto nodes send and receive messages; a --role supernode node relays them")
