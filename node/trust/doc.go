// Package trust is a node's trust in its network's operator: the operator
// keys it trusts, the certificates those keys sign and the revocations
// they issue. A Keeper
//
//   - verifies the certificate every announcement carries (Verify, the
//     directory's MegaVerifier): a mega-supernode needs a valid
//     mega-supernode certificate; in a certified network a regular
//     supernode needs a supernode certificate, whose ceiling the directory
//     clamps its capacity to;
//   - holds this node's own certificates: Promote makes a supernode a
//     mega-supernode, Demote returns it to a regular one, SetSupernodeCert
//     installs a supernode certificate; and Run drops them when they
//     expire or are revoked;
//   - keeps the revocations heard on protocol.RevocationTopic (checked by
//     a GossipSub validator, remembered until the revoked certificate would
//     have expired, and removed from the directory), and re-publishes those
//     submitted here (Revoke) every announce interval;
//   - keeps the verified mega-supernodes on the resource manager's
//     allowlist, so that a saturated node still accepts them.
//
// What a certificate changes of the node goes out through the ports of its
// Config: the supernode role (Role: the announced role, capacity and
// certificate; the announcement published at once), the directory
// (Directory), the allowlist and the hand-back after a demotion
// (Demoted). The package never imports node and holds no *node.Node; it
// builds no host and starts nothing in New: the revocation topic is joined
// by JoinRevocations, and Run is its one goroutine (with the topic's
// reader, which it owns). The certificate formats and their checks are the
// wire contract's, in package protocol; this package decides what a node
// does with them.
package trust
