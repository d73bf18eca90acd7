// Package viewclient is the ordinary node's side of the directory's view
// protocol (protocol.ViewID): the client half of supernode/view.go, over
// the pure rules of overlay/view.
//
// A pinned ordinary node does not subscribe to the announcement topic: a
// Client asks a supernode (the one the node is attached to, else a
// bootstrap peer, else one of its view, else a connected peer that speaks
// the view protocol) for the neighbourhood of the node's own key and its
// groups' keys on that supernode's ring, spares and megas, once per
// announce interval of its entries. Every entry is checked
// (protocol.OpenSigned) and applied to the node's directory, which then
// holds only the latest view; the node's ring is built from the view's
// members with the server's weights (Config.Publish), so its home clusters
// are the server's. After each refresh the Client cross-checks the node's
// own home cluster with a second supernode of another subnet; when they
// differ it asks the members both name, and leaves its supernode for
// Distrust when they outvote it (view.Judge; Session.Distrust).
//
// The name says which side it is: overlay/view holds the rules both sides
// share (what a view holds, the home it gives, the cross-check's verdict),
// supernode/view.go serves views, and this package asks for them.
//
// What it must not do: import node or supernode (it is given the host, the
// directory, the ring and the client side's Session at construction), build
// a host, or serve views (an ordinary node's hints, answered from its own
// view, are node's wiring of supernode.ViewServer). Its metrics keep the
// names they had in node (overlayd_directory_view_*): they are the
// directory's second tier, beside the topic's overlayd_directory_* series,
// and dashboards and the dircost benchmark read them.
//
// New does no I/O and starts nothing; Run is the one goroutine, owned by
// the caller, and ends with its context.
package viewclient
