// Package protocol is overlayd's wire contract, and this comment is its
// specification: the GossipSub topics and stream protocols, the protobuf
// messages of package pb that travel on them, their framing and size limits,
// who may open what, the order of frames, deadlines, refusals, and the rules
// a receiver applies before it acts on a message. The package has no
// goroutines, no host and no logs; every peer, whatever its role, speaks
// exactly this. pb/overlayd.proto is the source of truth for the encoding;
// this comment is the source of truth for behaviour, and the two sides of
// every protocol (the client, node/client; the supernode, package supernode)
// are held to it.
//
// Numbers below are the constants of this package where one exists, and
// otherwise the value the implementation uses today, with where it lives.
// "Default" marks a value an operator can change (node.Config).
//
// # Protocols and topics
//
//	ID                        kind       opened by -> served by                   frame limit          rcmgr service
//	/overlayd/supernodes/1    GossipSub  every serving supernode publishes        MaxAnnouncementSize  -
//	/overlayd/revocations/1   GossipSub  the node a revocation is submitted to    MaxCertSize          -
//	/overlayd/attach/1.0.0    stream     client -> any supernode                  MaxSessionFrame      overlayd.attach
//	/overlayd/relay/1.0.0     stream     supernode -> supernode in its directory  MaxRelayFrame        overlayd.relay
//	/overlayd/lookup/1.0.0    stream     supernode -> supernode in its directory  MaxLookupFrame       overlayd.lookup
//	/overlayd/locate/1.0.0    stream     attached client -> its own supernode     MaxLocateFrame       overlayd.locate
//	/overlayd/view/1.0.0      stream     ordinary node -> a serving supernode     MaxViewFrame         overlayd.view
//	/overlayd/tunnel/1.0.0    stream     any peer -> a peer exposing a service    MaxTunnelFrame       overlayd.tunnel
//
// The IDs are [DirectoryTopic], [RevocationTopic], [AttachID], [RelayID],
// [LookupID], [LocateID], [ViewID] and [TunnelID]. The resource-manager service names are declared
// next to the handlers that set them: supernode.AttachService,
// supernode.RelayService, supernode.LookupService and supernode.LocateService.
//
// Besides these, overlayd peers speak go-libp2p's own protocols: identify,
// ping, circuit relay v2 (a serving supernode runs the relay service and
// grants reservations only to the clients attached to it) and DCUtR.
//
// # Conventions
//
//   - A peer on the wire is its peer ID in binary form ([]byte(peer.ID)):
//     peer_id, subject, client, location, from, to, origin, member,
//     supernode, only and every element of members.
//   - An address is a binary multiaddr without a /p2p/ component.
//   - A message ID is [MessageIDLen] (16) bytes from crypto/rand
//     ([NewMessageID]), so that no peer can predict another's next ID.
//   - A group name is 1 to [MaxGroupName] (256) bytes; its home is the ring
//     owner of its bytes.
//   - A receiver ignores SessionFrame and RelayFrame kinds it does not
//     handle (including kinds meant for the other direction) and unknown
//     fields. A new kind or field can therefore be added within a version; a
//     changed meaning of an existing one needs a new protocol ID.
//   - "Home cluster" of a key is the first cluster.Size (3) distinct members
//     at the key's hash on the cluster ring (package overlay/ring, rules in
//     overlay/cluster). The ring holds the regular supernodes of the
//     directory, weighted by capacity; mega-supernodes are not on it. Each
//     peer computes it from its own directory, so two peers can briefly
//     disagree.
//
// # Framing
//
// Every message on an overlayd stream is one protobuf message prefixed by its
// length as an unsigned varint (the framing of go-libp2p's own protocols).
// [WriteFrame] writes a frame in a single Write; [FrameReader] reads frames
// under a per-stream limit (table above). The reader refuses a declared
// length above the limit before reading the body: a [*RejectError] of reason
// oversize wrapping [ErrFrameTooLarge]. A length that overflows 63 bits or is
// not minimally encoded, or a body that does not decode, is reason
// undecodable. On every overlayd stream a refused frame is fatal: the reader
// resets the stream (on an attach stream that ends the session). Writers do
// not check the limit, so a frame above it costs the writer the stream.
// [MaxAttachFrame] is not used on the wire: every frame of an attach stream,
// the handshake included, is read under [MaxSessionFrame].
//
// Every stream handler sets its resource-manager service first, refuses
// peers it does not serve by resetting the stream, reserves memory for its
// frames (and resets if the resource manager refuses), and sets a deadline
// before it reads.
//
// # Versions
//
// [Version] (1) is carried in Announcement.protocol_version and
// AttachRequest.protocol_version; no receiver checks either today. Stream
// IDs carry their own semantic version (/overlayd/<name>/<x.y.z>) and topics
// a version number (/overlayd/<name>/<n>); an incompatible change bumps the
// major version and with it the ID, and the peers of both versions do not
// talk to each other.
//
// # Supernode directory
//
// Every serving supernode publishes a [pb.Announcement] on [DirectoryTopic]:
// one as soon as it serves, the next at a uniformly random point of the
// following interval, then every announce interval less up to 10%: the
// configured one (default 10 s), stretched to [AnnounceInterval] of the
// number of entries in its directory (about [AnnounceBudget] announcements
// a second for the whole tier, at most [MaxAnnounceInterval]), so that no gap exceeds the interval; one at once when it is promoted
// to or demoted from mega-supernode and when an auto node starts demoting;
// and a last one with departing set when it stops serving. capacity is the
// number of attached peers it takes and load the number attached now;
// capacity - load is its spare capacity, which clients and BUSY alternatives
// follow. seq is max(previous seq + 1, the announcer's wall clock in
// nanoseconds), so that it keeps increasing across restarts.
//
// The GossipSub router runs with message signing, strict signature
// verification and flood publishing, so every message names its signer. The
// topic validator runs inline and applies the announcement to the
// receiver's directory; only an accepted announcement is forwarded. A
// receiver accepts it only if all of these hold, checked in this order (the
// reason it counts otherwise is in brackets):
//
//   - the signer has had at most 4 announcements accepted in the receiver's
//     own announce interval, and the peer that forwarded the message at most
//     max(64, 2 × live entries) (token buckets refilled over the interval,
//     directory.DefaultLimits) [rate_limited];
//   - the message is at most [MaxAnnouncementSize] bytes [oversize];
//   - it decodes as a pb.Announcement [undecodable];
//   - peer_id decodes, role is supernode or mega, capacity >= 1, at least one
//     and at most [MaxAnnouncedAddrs] addresses, interval_ms within
//     [[MinAnnounceInterval], [MaxAnnounceInterval]], seq > 0, a mega
//     announcement carries a mega_cert, mega_cert is at most [MaxCertSize]
//     bytes, and every address decodes as a multiaddr [invalid];
//   - peer_id equals the GossipSub signer [signer_mismatch];
//   - for role mega, unless departing, the certificate verifies (see Mega
//     certificates) [a certificate reason];
//   - for role supernode in a certified network (see Supernode
//     certificates), unless departing, mega_cert is not empty [uncertified]
//     and verifies as a supernode certificate [a certificate reason]; the
//     entry's capacity is then min(capacity, the certificate's capacity);
//   - issued_unix_ms (the announcer's clock when it signed) is not more than
//     [ClockSkew] ahead of the receiver's clock [issued_in_future], and
//     issued + [MissedAnnouncements] × the clamped interval + ClockSkew is
//     not past [expired] (an announcement without issued_unix_ms, from an
//     earlier build, is not checked); the clamped interval is interval_ms at
//     most [MaxIntervalFactor] times the receiver's own ([ClampInterval]),
//     the receiver's own being [AnnounceInterval] of its directory's size
//     (an ordinary node that keeps a view clamps only to
//     [MaxAnnounceInterval]);
//   - seq is greater than the last seq accepted from that peer [stale_seq];
//   - the peer is known, or the receiver remembers fewer than
//     directory.DefaultMaxEntries (65,536) peers, live or recently departed
//     [directory_full].
//
// A refusal that depends on the receiver — stale_seq, directory_full,
// rate_limited, expired, issued_in_future, and the certificate reasons
// untrusted, revoked, expired and not yet valid — ignores the message (not
// forwarded, the forwarder not penalised: it may have been valid where it
// came from); every other refusal rejects it (not forwarded, and counted
// against the forwarding peer's GossipSub score: invalid messages weigh
// -10 each, squared and decaying, every peer starts at +50, and one below
// -100 is graylisted; peers beyond 8 on one IP address are penalised,
// loopback excepted). An accepted entry expires [MissedAnnouncements]
// times its clamped interval after it was issued (or accepted, if that is
// earlier) and is refreshed by each accepted announcement, a
// mega-supernode's no later than its certificate's not_after plus
// [ClockSkew]; a departing announcement removes it at once. The receiver
// keeps the peer's last seq for 2 × MissedAnnouncements intervals after the
// last accepted announcement, so a delayed copy of an older one cannot bring
// a departed peer back.
//
// What a receiver does with accepted entries is its own policy. A serving
// supernode of an open network puts an entry on its ring only once it is
// confirmed: a connection to the entry's peer ID from an IP address the
// entry announced, whose identify lists [AttachID] (node/dirdriver/confirm.go). Every
// node, through package overlay/cluster: announced capacity counts at
// most cluster.MaxCapacity (6,400) unless a certificate signs it; a new
// entry's ring weight ramps from 1 to full in 4 steps over 360 of the
// receiver's intervals; at most 2 supernodes per /24 (IPv4) or /48 (IPv6)
// are ring members (the oldest); and the ring never exceeds
// cluster.MaxMembers members of cluster.MaxTotalWeight weight.
//
// Only supernodes, mega-supernodes and --role auto nodes subscribe to the
// topic. A pinned ordinary node keeps a partial view instead (see Views).
//
// # Views
//
// An ordinary node opens [ViewID] to a serving supernode (its own, else a
// bootstrap peer, else one of its view) and writes one [pb.ViewRequest]:
// 1 to [MaxViewKeys] keys of 1 to [MaxViewKey] bytes (its own peer ID, its
// groups' names), at most [MaxViewEntries] haves (peer_id, seq of entries
// it holds), and neighbours_only. The supernode resets the stream when it
// does not serve (an auto node while ordinary), when 8 view requests are
// already being served, or when the request breaks a bound (at most
// supernode.MaxViewRequest bytes); it answers one [pb.ViewResponse] and
// closes. (An ordinary node that keeps a view answers too, with a hint:
// no ring version, and its view's spares and megas with weight 0, so that
// a node that joined through it learns supernodes to ask. A hint is not a
// view: the asking node goes on to a supernode named in it.) The response
// holds its ring's version and at most
// [MaxViewEntries] entries: for each key the first 6 distinct ring members
// at the key (overlay/view.Neighbours) with their ring weights, then,
// unless neighbours_only, up to 8 regular supernodes with spare capacity
// (drawn weighted by spare) and up to 8 megas, weight 0 when not on the
// ring. Each entry names its peer and seq and carries signed: the
// go-libp2p-pubsub Message its supernode published on [DirectoryTopic] as
// it signed it (at most [MaxSignedAnnouncement] bytes), or nothing when the
// request's have holds that peer at the same or a newer seq.
//
// The node checks every signed message with [OpenSigned] (the topic, and
// the signature of From over the message without signature and key, as
// GossipSub's StrictSign does) [bad_signature, undecodable, oversize],
// requires From to be the entry's peer [signer_mismatch], and applies the
// announcement with the rules above (an entry it holds at that seq already
// is not counted). Its directory then holds the response's entries only; its
// ring is the response's entries with a weight that it holds, with those
// weights (capped at cluster.MaxWeight), so the home clusters of the keys
// asked are the server's. After each refresh it asks a second supernode
// (another /24, not in that home) for its own key with neighbours_only;
// when the homes differ it asks the members of both, and when two or more
// agree on one home, none backs its supernode's, and a member of that
// home answered yet is not on its supernode's view's ring (an omission,
// not weights, which honest supernodes differ in while one ramps), it
// leaves that supernode for 10 min (node/viewclient, overlay/view.Judge).
//
// # Mega certificates
//
// An operator's Ed25519 key signs a [pb.MegaCertificate] in a libp2p signed
// envelope (go-libp2p core/record) with domain [MegaCertDomain] and payload
// type /overlayd/mega-cert/1 ([SealMegaCert]). A mega announcement carries it
// in mega_cert. [VerifyMegaCert] accepts it only if, in this order: it is at
// most [MaxCertSize] bytes [cert_oversize]; the envelope parses
// [cert_malformed]; its signature is valid for the domain [cert_signature]; the
// payload type is right and subject decodes, role is MEGA, capacity >= 1 and
// serial != 0 [cert_malformed]; the signer is one of the receiver's trusted
// operator keys [cert_self_signed if the signer is the subject, otherwise
// cert_untrusted_key]; subject is the announcing peer [cert_wrong_subject]; now
// is no earlier than not_before - [ClockSkew] [cert_not_yet_valid] and no later
// than not_after + ClockSkew [cert_expired]; the serial is not revoked
// [cert_revoked]. A receiver that trusts no operator key refuses every mega
// announcement. The reasons are [CertReasons]; a refused certificate rejects
// the whole announcement.
//
// A mega-supernode announces the certificate's capacity. It checks its own
// certificate every quarter announce interval (at least 50 ms) and, once it
// has expired or been revoked, announces itself as a regular supernode of its
// configured capacity and detaches the clients above that capacity over the
// drain period. Receivers put the addresses of verified mega-supernodes on
// their resource manager's allowlist. Operator keys and certificates have
// text forms for files and flags: [EncodeKey], [DecodeKey], [EncodeBlob],
// [DecodeBlob].
//
// # Supernode certificates
//
// A supernode certificate is the same [pb.MegaCertificate] payload with role
// SUPERNODE, signed by an operator key in a signed envelope of its own domain
// [SupernodeCertDomain] and payload type /overlayd/supernode-cert/1
// ([SealSupernodeCert]); its capacity is a ceiling. Mega certificates are
// unchanged. [VerifySupernodeCert] applies the checks of VerifyMegaCert in
// the same order, except that an envelope whose signature is not valid for
// the supernode domain but is valid for the mega domain is refused as
// [cert_wrong_role] (and VerifyMegaCert refuses a supernode certificate so
// too); a payload whose role does not match its domain is cert_malformed.
// Because the domains differ, no signature over one kind can be read as the
// other.
//
// A node runs a certified network when it trusts at least one operator key,
// unless its operator chose the open mode (node.Config.NetworkMode,
// --network-mode certified|open; certified without a trusted key is a
// configuration error).
// In a certified network a supernode announcement carries the announcer's
// supernode certificate in mega_cert, and is refused without one [uncertified]
// or with one that does not verify [a certificate reason], in both cases
// counted and rejected; a node refuses its own such announcement too, so it
// never sends it. The accepted entry's capacity is clamped to the certificate's
// ceiling, so that ring weight, spare capacity and every order derived from
// capacity follow it; the entry expires no later than the certificate's
// not_after + [ClockSkew], and a revocation of its serial removes it. A
// mega-supernode's announcement carries its mega certificate; once demoted it
// carries its supernode certificate again. In an open network supernodes are
// self-asserted and a certificate they carry is ignored; mega-supernodes need
// their certificate in both modes.
//
// # Revocations
//
// An operator revokes a certificate serial with a [pb.MegaRevocation] in a
// signed envelope of domain [RevocationDomain] (payload type
// /overlayd/mega-revocation/1, [SealRevocation]), published on
// [RevocationTopic] through the same GossipSub router. The topic validator
// runs inline [VerifyRevocation]: at most [MaxCertSize] bytes
// [cert_oversize], the envelope parses [cert_malformed], the signature is
// valid for the domain [cert_signature], the signer is a trusted operator key
// [cert_untrusted_key], serial != 0 [cert_malformed]. A refused revocation is
// rejected; an accepted one is forwarded and applied: the serial is
// remembered until not_after + [ClockSkew], the directory drops the entry
// whose certificate (mega or supernode) has that serial, and later
// certificates with it fail [cert_revoked]. issued_unix is carried but not
// checked. The node the revocation was submitted to re-publishes it every
// announce interval until not_after + ClockSkew, so that nodes that join
// later learn it.
//
// # Attach handshake
//
// A client opens an [AttachID] stream to a supernode and keeps it open for as
// long as it stays attached there; everything it sends or receives travels
// on it. Any peer may open one: the supernode does not consult its directory.
//
//	client                                        supernode
//	AttachRequest{protocol_version, reason,  ->
//	              session_seq, presence}
//	                                         <-   AttachResponse{ACCEPT, keepalive_ms}
//	SessionFrame ...                         <->  SessionFrame ...
//
//	AttachRequest                            ->
//	                                         <-   AttachResponse{BUSY, retry_after_ms, alternatives, reason}
//	                                              or AttachResponse{REDIRECT, alternatives, reason}
//	                                              close
//
// The supernode, in this order: sets service overlayd.attach; counts the
// stream among the handshakes in progress — at most 64 in all and 2 per peer
// (supernode.DefaultMaxHandshakes, DefaultMaxHandshakesPerPeer), past either
// it answers BUSY at once, unread; reserves 2 × [MaxSessionFrame] (reset if
// refused); then
//
//  1. reads the AttachRequest within 2 s of the stream's arrival
//     (supernode.DefaultRequestTimeout; a timeout or a frame it cannot read
//     resets the stream) — before it takes a slot or any state for the
//     peer, so stalled streams hold no slot;
//  2. checks presence, the client's signed PresenceClaim (see Client
//     claims) for itself and session_seq, and resets the stream if it does
//     not verify;
//  3. if it is not admitting (an auto node that does not serve, a supernode
//     that is draining or stopping), answers REDIRECT with reason
//     "not admitting" and closes;
//  4. if the peer has no session here and the attached-peers semaphore has
//     no free slot, answers BUSY with retry_after_ms (default 2000) and
//     reason "at capacity", and closes. A peer that already has a session
//     here takes that session's slot over instead (claimed under the
//     admission's lock; if the old session ended meanwhile, the new one
//     asks the semaphore like anyone else), and the old session's stream is
//     reset at once;
//  5. allocates the session and answers ACCEPT with keepalive_ms (default
//     5000), within 5 s of the arrival (supernode.DefaultHandshake).
//
// Every refusal is counted by reason
// (overlayd_supernode_attach_refused_total). BUSY and REDIRECT carry
// up to [MaxAlternatives] other supernodes of the supernode's directory with
// spare capacity, drawn at random weighted by clamped spare capacity without
// replacement (cluster.Sample), so refused clients spread in proportion to
// room. protocol_version and reason are not checked; reason (INITIAL,
// FAILOVER, RETURN) is informational.
//
// The client gives one attempt (open, request, answer) 5 s. session_seq is
// max(its previous session_seq + 1, its clock in nanoseconds): strictly
// increasing over the client's sessions, it orders presence records. On BUSY
// or REDIRECT the client closes the stream; it does not ask that supernode
// again before retry_after_ms (BUSY) or one announce interval (REDIRECT) has
// passed, and tries the alternatives ([PeerAddrsFromPB]: at most
// MaxAlternatives, entries that do not decode skipped) within the same pass.
// On ACCEPT it refuses a keepalive_ms outside [1 ms, 1 h] (reset; the
// attempt failed) and clears the deadlines.
//
// # Attach session
//
// After ACCEPT every frame in either direction is a [pb.SessionFrame]:
//
//	kind             direction            carries
//	ping             client -> supernode  Ping{seq}
//	pong             supernode -> client  Pong{seq of the ping}
//	detach           either               Detach{reason; from the supernode also alternatives, spread_ms}
//	send             client -> supernode  DirectMessage{id, to, sealed}
//	deliver          supernode -> client  DirectMessage{id, from, to, sealed, origin}
//	ack              either               Ack{id, from, to, origin, signed}
//	result           supernode -> client  Result{id, status, detail; for a publish seq, epoch}
//	group_op         client -> supernode  GroupOp{group, join, claim; resume, resume_epoch, resume_seq}
//	publish          client -> supernode  GroupPublish{group, id, payload}
//	group_message    supernode -> client  GroupMessage{group, epoch, seq, from, id, payload}
//	gap              supernode -> client  Gap{dropped}
//	members_request  client -> supernode  MembersRequest{id, group}
//	members          supernode -> client  Members{id, group, members or error}
//	resumed          supernode -> client  Resumed{group, epoch, seq, missed, missed_unknown}
//
// Keepalive: the client sends Ping every keepalive_ms with seq 1, 2, ...
// (pings it sends while moving home carry seq 0); the supernode answers each
// with a Pong of the same seq. The supernode ends a session (reset) when no
// frame of any kind has arrived for [MissedKeepalives] × keepalive; the client
// declares the supernode dead when no Pong has arrived for MissedKeepalives
// × keepalive (other frames do not count). The client writes each frame
// under a write deadline of one keepalive.
//
// The supernode writes every frame after the AttachResponse through one
// bounded queue per client (supernode.OutboxLimit, 1024 frames, written with
// no write deadline). When the queue is full the newest frame is dropped, and
// once the frames queued before the drop are written the client gets
// Gap{dropped} with the number of frames missed, at the place they are
// missing. Pongs, results, acks and a Detach share that queue, so they can be
// dropped too and arrive behind the deliveries queued before them.
//
// A session ends in one of these ways:
//
//   - The client leaves: it sends Detach{reason}, closes its write side and
//     resets the stream; the supernode closes on reading the Detach.
//   - The supernode stops or drains clients: it queues Detach{reason,
//     alternatives, spread_ms} (resetting the stream if it cannot) and gives
//     the client 1 s to end the session before its read deadline does. The
//     client ends the session on reading it (reset), waits a uniformly random
//     time in [0, min(spread_ms, 1 min)) (one keepalive if spread_ms is 0),
//     and starts a failover pass that tries the alternatives right after its
//     home cluster. A stopping supernode spreads its clients over one
//     announce interval; a draining one (demotion, a mega handing back
//     clients) detaches them in ten steps over the drain period (default
//     1 min), each Detach spread over one step.
//   - Silence (above), a stream error or a refused frame: the stream is
//     reset; the client waits a uniformly random time in [0, keepalive)
//     before its failover pass.
//
// When a session ends the supernode frees the slot, tells the client's
// presence homes that it left, and removes it from every group it joined
// there.
//
// # Attach passes and return home
//
// A failover pass asks, in this order and at most 8 in all: the members of
// the client's home cluster in ring order, the alternatives it was offered,
// the regular supernodes of its directory with spare capacity in random
// order weighted by spare capacity, then the mega-supernodes, ordered by a
// capacity-weighted ring of the mega-supernodes keyed by the client's ID. It
// skips itself and every supernode it was told to wait for. With no
// candidate at all it asks its bootstrap peers. After a pass without ACCEPT
// it backs off (overlay/backoff: default base 1 s, maximum 1 min, honouring
// the largest retry_after_ms heard, capped at 1 min). Before its first pass
// a client waits for the ring to settle (one announce interval plus two ring
// debounce windows after its first ring, at most twice that in all), then a
// uniformly random time within the backoff base.
//
// A client attached outside its home cluster checks, every half return
// interval plus a uniformly random time within one return interval (default
// 30 s, so 15 s to 45 s), whether a home cluster member announces spare
// capacity, and if so attaches there (reason RETURN) without leaving its
// current session. On ACCEPT it re-joins its groups on the new session,
// keeps reading the old session for 1 s (pinging the new one every half
// keepalive meanwhile), then sends Detach{"returning home"} on the old one.
// On every new session the client sends GroupOp{join} for each group it has
// joined, with resume set and (resume_epoch, resume_seq) the last message of
// the group it delivered, when it has delivered one (see Group resume).
//
// # Direct messages
//
// A client A sends to a client C through A's supernode SA and C's supernode
// SC:
//
//	A                      SA                                SC                     C
//	send{id, to, sealed} ->
//	                       relay deliver{id, from=A, to,  ->
//	                                     sealed, origin=SA}
//	                                                         deliver{...}       ->
//	                                                                            <-  ack{id, from=C, to=A, origin=SA, signed}
//	                       <- relay ack{id, from=C, to=A, origin=SA, signed}
//	<- ack{id, from=C, to=A, origin=SA, signed}
//
// End to end. sealed is a signed envelope (domain [DirectDomain]) of a
// SealedDirect{id, to, sent_unix_ms, ciphertext}, signed by A; ciphertext is
// the payload sealed with HPKE (RFC 9180: DHKEM(X25519, HKDF-SHA256),
// HKDF-SHA256, ChaCha20-Poly1305) to C's X25519 key, the Montgomery form of
// C's Ed25519 identity key, with info "overlayd/direct/1" followed by A, C
// and id (each length-prefixed): see [SealDirect]. C opens it with
// [OpenDirect] and refuses — no ack, no delivery — a message not signed by
// the peer in from, signed for another id or recipient, or not sealed to
// it. C's ack carries signed, an envelope (domain [AckDomain]) of
// AckRecord{id, sender=A} signed by C ([SignAck]); A believes no ack that
// [VerifyAck] refuses. So a supernode on the path can drop or delay a direct
// message, but it cannot read it, alter it, forge one in a client's name, or
// make A believe that a message it dropped was delivered. Only Ed25519
// identities (every overlayd peer's) can send and receive. The plaintext
// payload field is unused: a supernode refuses a send that carries one.
//
// SA refuses with Result{id, INVALID} a send whose id is not 16 bytes, whose
// to does not decode, that carries a plaintext payload, or whose sealed is
// empty or exceeds [MaxSealedDirect]; then takes a
// slot of its relays semaphore or answers Result{id, BUSY}. It sets from to
// the client and origin to itself, whatever the client wrote there, and
// routes the message off the session's goroutine, holding the slot until
// the message is delivered locally or queued on a relay link (not until the
// ack):
//
//  1. C attached to SA: deliver it on C's session.
//  2. Otherwise locate C: SA's lookup cache (skipped for a retry), its own
//     presence records, then the other members of C's home cluster over
//     [LookupID]. Nothing found, or SA itself found (a stale record):
//     Result{id, OFFLINE}. No lookups slot free also yields OFFLINE.
//  3. Queue a relay deliver to SC; a full link queue yields
//     Result{id, UNREACHABLE} and drops the cached location.
//
// SA remembers the (client, id) of its last 4096 sends (overlay/dedup); a
// send it has seen is a retry and is located afresh, skipping the cache. SC
// delivers a relay deliver to C if C is attached there, and otherwise
// returns it to SA as a relay nack. SA, on a nack, drops its cached location
// for C and, under a relays slot (none free: the nack is dropped), locates C
// afresh: found at a supernode other than the one that nacked, it routes the
// message again; otherwise Result{id, OFFLINE} to A. A message dropped on
// the way (a full session queue at C, a lost relay frame) produces no result;
// the sender's retry recovers it.
//
// C acks every deliver it could open, duplicates included (A may have missed
// the first ack), echoing id and origin, before it drops duplicates by (from, id) in a
// window of its last 8192 message keys and hands the message to its
// listeners. SC overwrites the ack's from with C and sends it to origin over
// a relay link (or hands it to a local client if origin is SC itself); SA
// hands a relay ack to the local client named in to. An ack means that C's
// node read and opened the message; a delivered message has no Result. A
// client matches results to its requests by id, and an ack by id and C's
// signature.
//
// A tries a send up to 4 times with the same id, waiting max(2 × its own
// configured keepalive, 500 ms) each time (default 10 s). INVALID is final;
// OFFLINE, UNREACHABLE and BUSY make it wait half that time before the next
// try. So while both ends stay attached a message reaches C's node once
// (at-least-once on the wire, deduplicated within the window).
//
// # Groups
//
// A group's home is the ring owner of its name (one supernode, as the
// sender's ring sees it). Membership is soft state kept by the home:
//
//	client      its supernode S                           home H
//	group_op{group, join, claim} ->
//	            relay membership{[group, member, supernode=S, join, refresh, claim]} ->
//
// S ignores a GroupOp with an invalid name ([CheckGroupName]) or whose
// claim is not the client's MembershipClaim for this group, S and join (no
// answer); otherwise it adds the
// client to, or removes it from, its local members of the group and tells H
// (directly if S is H; a record S has no home for, having no ring yet, is
// dropped, and a join is sent again with the next refresh). Every refresh
// interval (its announce interval) S re-sends a join with refresh set for every
// standing membership, and when a session ends it sends a leave for each of the
// client's groups. Batches hold at most 1000 records. H applies a record only
// if its supernode is the link's peer (a supernode speaks only for its own
// clients), member decodes and the group name is valid. A join or refresh
// must carry the member's MembershipClaim for this group at that supernode
// ([VerifyMembership]; the claim H already verified for the member there is
// not checked again); one whose seq is below the newest H applied for the
// member renews the member's record there at most and moves nothing. A join
// records the member at that supernode (moving it from any other); a refresh does the same
// unless the member is recorded at another supernode by a record that has not
// expired (the member moved and this is its old supernode's refresh); a leave
// removes it only where it is recorded at that supernode. Records expire 3 ×
// H's refresh interval after the last join or refresh; a group without members
// is forgotten 3 refresh intervals after its last use.
//
// Publish:
//
//	P      its supernode S                  home H                             member's supernode M   member
//	publish{group, id, signed} ->
//	       relay publish{group, id, signed,
//	                     from=P, origin=S} ->
//	                                        (checks signed, numbers, stamps)
//	                                        relay group_message{group, epoch, seq,
//	                                              from, id, publish, stamp} ->  (one per M)
//	                                                                                                   group_message ->
//	       <- relay publish_result{to=P, result{id, OK, seq, epoch}}
//	<- result{id, OK, seq, epoch}
//
// Signatures. signed is P's PublishClaim{group, id, payload} in a signed
// envelope (domain [PublishDomain], at most [MaxSignedPublish] bytes,
// [SignPublish]); the payload field is unused. H numbers nothing whose
// signed does not verify for from, group and id ([VerifyPublish]): it
// answers Result{id, INVALID} and counts it. For each message H signs a
// GroupStamp{group, epoch, seq, SHA-256 of publish} (domain [StampDomain],
// at most [MaxStamp] bytes, [Stamp]) and sends publish (P's envelope,
// unchanged) and stamp with it. M fans out only a group message that came
// from the group's home by its own ring and whose stamp verifies for that
// home ([VerifyStamp]), and counts the rest. A member checks both again
// ([OpenGroupMessage]), accepting as the stamper the home by its own ring
// or any live regular supernode of its directory (rings disagree for a
// while when supernodes come and go, and a member must not drop genuine
// messages then; a supernode that is not the home can at most renumber
// genuine publishes, and a member delivers a publish's (from, id) once),
// reads the payload from publish, and drops a message for a group it has
// not joined. So a
// supernode can drop or delay a group message, but cannot publish in a
// member's name, renumber, alter, or invent one. Group payloads are not
// encrypted: H and every M can read them.
//
// S answers Result{id, INVALID} to an id that is not 16 bytes, an invalid group
// name, a plaintext payload, or a signed above [MaxSignedPublish], and Result{id, UNREACHABLE} when it has
// no ring or the link to H is full. A publisher need not be a member. H takes a
// slot of its fanout-jobs semaphore before numbering (none free: Result{id,
// BUSY}, no seq spent), gives the message the group's next seq (1, 2, ... per
// group record: a group H has forgotten starts again at 1) and the group
// record's epoch (H's clock in nanoseconds when it created the record, and
// always greater than every epoch H gave before, so a recreated group's
// (epoch, seq) never repeat an earlier one), encodes the GroupMessage once and
// queues the same bytes on the link to every supernode holding at least one
// member (and into its own local fanout), all under one lock, so that each link
// carries a group's messages in seq order. It then answers Result{id, OK, seq,
// epoch} to the publisher through origin. M wraps the message once into a
// SessionFrame and fans it out to its local members. The only field is set only by the
// per-member fanout kept for benchmarks: deliver to that member alone.
//
// A member sees a group's messages in the order the home numbered them
// (increasing seq within an epoch, unless the home forgot the group in
// between), with gaps where a frame was lost (a full or failed link, a full
// fanout engine at M, or its own full session queue, the last announced by
// Gap). The epoch changes when the group's home changes or restarts. A client
// drops a group message whose (group, epoch, seq) it has seen, and one whose
// (from, id) it has seen.
//
// # Group replication and resume
//
// H numbers a publish, appends it to the group's replay log, and sends it as a
// relay replica frame (the stamped GroupMessage) to the other members of the
// group's home cluster (the first 3 distinct ring members at the group's
// name; H is the first). A replica checks that it and the sender are both in
// that cluster, the stamp is the sender's and the publisher's signature holds,
// logs it and answers replica_ack{group, epoch, seq}. H answers the publisher
// Result{id, OK, seq, epoch} once a majority of the cluster (H counting) holds
// the message, or Result{id, BUSY} after 2 s without. H remembers the
// (epoch, seq) it gave each (from, id) (4,096 per group): a publish whose ID
// it numbered is answered with the same position and not numbered again, so a
// client retries a publish with the same id (up to 8 attempts, the send
// timeout apart).
//
// A supernode that becomes a group's home (it has no record of the group)
// sends replica_sync{group, epoch, after_seq} (the last position its log
// holds) to the first 5 distinct ring members at the group's name other
// than itself, each answering with the replica frames
// they hold after that position (at most 4,096) then replica_sync{done,
// epoch, after_seq = the last sent}. A supernode whose own ring makes it the
// group's home does not answer (the asker asks again every 250 ms), and a
// supernode numbers a publish only while its ring makes it the group's home
// (else Result{id, BUSY}). The new home numbers nothing until all answered or
// 2 s passed (publishes meanwhile wait, at most 1,024), then starts a new
// epoch greater than every epoch in its log and remembers the logged IDs. A
// sync answer's stamps may be another home's; the publisher's signature must
// hold.
//
// Resume of a member: a GroupOp{join, resume} makes the member's supernode M
// hold the member out of the group's local fanout and send a membership
// record with resume and the position; H replays the logged messages after
// that position to M as group_message frames with only = the member (in
// order, paced: at most 512 replayed frames per 10 ms per home), then sends
// replay_done{member, Resumed}; M lets the member in and sends it
// resumed{group, epoch, seq of the last replayed, missed, missed_unknown}.
// missed counts messages the log no longer held; missed_unknown says the
// member's epoch is older than the log (missed is then a lower bound). M lets
// a member in whose replay_done has not come within 3 refresh intervals, with
// resumed{missed_unknown}. Only the group's home (by M's ring) may send
// replay_done.
//
// Resume of a supernode: every membership refresh from M carries resume and
// supernode_resume with the position of the last group message M fanned out
// to its members. A home for which M is new in the group (no member recorded
// at M, no replay to M running) replays the group to M as ordinary
// group_message frames and sends M no live frame of the group until that
// replay is done (replay_done with no member). Replayed messages another home
// stamped are stamped again by H.
//
// Members: a client sends MembersRequest{id, group}; its supernode answers
// Members{id, group, members} from its own records if it is the group's home,
// and otherwise under a lookups slot asks the home with
// LookupRequest{group}. Failures are answered with Members.error: an invalid
// name, no ring ("no ring yet: the group has no home"), no lookups slot
// ("supernode busy"), or a failed lookup ("group home unreachable: ...").
// A group the home does not know yields an empty list. The client waits
// twice the send timeout.
//
// # Client claims
//
// A client signs, with its identity key, every record about itself that
// supernodes carry to other supernodes, in a libp2p signed envelope with a
// domain of its own ([SignPresence], [SignMembership]; at most [MaxClaim]
// bytes):
//
//   - PresenceClaim{supernode, session_seq} (domain [PresenceDomain]), in
//     AttachRequest.presence: the supernode refuses (resets) an attach
//     whose claim does not verify for the remote peer, itself and the
//     request's session_seq, and copies it into every PresenceRecord it
//     sends for that session (claim);
//   - MembershipClaim{group, supernode, join, seq} (domain
//     [MembershipDomain]), in GroupOp.claim: the supernode ignores a group
//     op whose claim does not verify for the client, the group, itself and
//     the op's join, and copies it into every MembershipRecord it sends for
//     that membership. seq is the client's clock in nanoseconds, strictly
//     increasing per client.
//
// A supernode that relays a claim can drop it, but cannot forge or alter
// it: the receivers below check it, and count what they refuse in
// overlayd_supernode_records_refused_total{record}.
//
// # Presence
//
// A client's location is kept by the members of its home cluster (keyed by
// the client's binary peer ID):
//
//	S (the client's supernode)                                      each home member
//	relay presence{[client, location=S, session_seq, attached, claim]} ->
//
// S sends attached=true when a session starts and again every refresh
// interval (its announce interval), and attached=false when the session
// ends; a home member that is S applies its records directly. Batches hold
// at most 1000 records. There is no answer: a lost record is repaired by
// the next refresh. A home member applies a record only if location is the
// link's peer and client decodes; it ignores a record whose session_seq is
// lower than the one it holds; attached=true records (location, session_seq)
// with an expiry 3 × its own refresh interval away, but only when claim
// verifies as the client's PresenceClaim for that location and session_seq
// ([VerifyPresence]; a refresh of the record it holds is not checked
// again), so a supernode cannot move a client to itself; attached=false removes
// the record only if it names the same location. So a late "left" from an
// old supernode cannot erase a newer attachment elsewhere. Expired records
// are never answered.
//
// # Relay links
//
// A supernode opens a [RelayID] stream to another supernode when it first has a
// frame for it, and writes RelayFrames ([pb.RelayFrame]) on it; it never reads
// from it. Frames back travel on the other supernode's own stream, so a pair of
// supernodes talk over one long-lived stream per direction.
//
//	kind            meaning for the receiver
//	deliver         a DirectMessage for a client attached here
//	nack            a deliver the peer could not deliver, returned to this supernode
//	ack             an Ack for a client attached here (this supernode is its origin)
//	presence        records for clients whose home cluster includes this supernode
//	membership      records for groups this supernode is home to
//	publish         a GroupPublish for a group this supernode is home to
//	group_message   a numbered message from a group's home for the local members
//	publish_result  a publish's Result for the publisher, attached here
//	replica         a numbered GroupMessage to hold in the group's replay log (this supernode is in its home cluster)
//	replica_ack     a replica's ack for a publish this supernode numbered
//	replica_sync    a new home's request for replicas, or (done) the end of an answer to ours
//	replay_done     a group's home finished a replay to this supernode
//	store           a direct message to store for an offline recipient (see Offline messages)
//	store_result    the answer to a store
//
// Sender: one queue of 4096 frames per peer (a full queue drops the frame and
// reports it, as UNREACHABLE where a client waits); opening the stream is
// bounded by 5 s and each frame's write by a 10 s deadline; a failed open or
// write loses that frame, resets the stream and drops the cached client
// locations that point at that peer, and the next frame opens a new stream.
// A link idle for 1 min is closed. Receiver: sets service overlayd.relay;
// resets the stream unless the opener is in its directory (checked once,
// when the stream opens); reserves [MaxRelayFrame] of memory (reset if
// refused); reads frames in order, each under a 2 min read deadline; any
// read error or refused frame resets the stream. There is no BUSY on a link:
// a full queue drops.
//
// # Lookup
//
// A supernode asks a home cluster member where a client is, or a group's
// home who its members are, one question per [LookupID] stream:
//
//	asker                                 home
//	LookupRequest{client} or {group}  ->
//	                                  <-  LookupResponse{found, location} or {found, members}
//	                                      close
//
// The server sets service overlayd.lookup, resets the stream unless the asker
// is in its directory, reserves 2 × [MaxLookupFrame] (reset if refused), sets a
// deadline of the lookup timeout (2 s), reads one request and answers. A
// request with a group is a group question: found if the server holds a record
// of that group as its home, members every member it records. Otherwise it is a
// presence question: found and location if client decodes and the server holds
// an unexpired presence record for it. location_addrs is not set. The asker
// gives the whole exchange the lookup timeout. To locate a client a supernode
// takes one slot of its lookups semaphore and asks the other members of the
// client's home cluster in ring order, each in turn, until one has found it; it
// caches the answer 5 s (at most 10,000 entries).
//
// # Locate
//
// A client asks its own supernode where another peer is attached, to reach
// it through that supernode's circuit relay (/p2p/<location>/p2p-circuit):
//
//	client                              its supernode
//	LookupRequest{client: target}  ->
//	                               <-   LookupResponse{found, location, location_addrs}
//	                                    close
//
// A supernode serves [LocateID] only while it runs its relay service (while it
// serves). It sets service overlayd.locate, resets the stream unless the asker
// is attached to it, reserves 2 × [MaxLocateFrame] bytes (reset if refused), sets an 8 s
// deadline, and reads one request; its client field must decode (else reset)
// and its group field is ignored. It answers itself if the target is attached
// to it, and otherwise locates it as for a direct message; found is false when
// that fails, including for lack of a lookups slot. location_addrs are its own
// addresses or those its directory holds for location. The client gives the
// exchange 8 s, skips addresses that do not decode, and uses its own
// directory's addresses for location when none remain.
//
// # Tunnel
//
// A peer carries one TCP connection to a service another peer exposes on one
// [TunnelID] stream at a time (node/tunnel implements both sides). The
// connecting side opens the stream, on a relayed (limited) connection if that
// is all it has, and the exchange is:
//
//	connecting side                        exposing side
//	TunnelOpen{service, tunnel_id}     ->
//	                                   <-  TunnelOpenResponse{status, detail}
//	(on TUNNEL_OK) TunnelFrame ...    <->  TunnelFrame ...
//
// Frames are varint-length-prefixed as everywhere; TunnelOpen and
// TunnelOpenResponse are at most [MaxTunnelOpenFrame] bytes and are read
// without reading ahead (the frames after an answer belong to the data
// reader); a TunnelFrame is at most [MaxTunnelFrame] bytes and carries at most
// [MaxTunnelData] bytes of data. service is 1 to [MaxTunnelServiceName] bytes
// of letters, digits, '-', '_' and '.'; tunnel_id is [TunnelIDLen] bytes from
// crypto/rand, chosen by the connecting side ([CheckTunnelOpen]).
//
// The exposing side sets service overlayd.tunnel, reserves [MaxTunnelFrame]
// bytes (reset if refused), gives the request a 10 s deadline and answers, in
// this order: TUNNEL_BAD_REQUEST for a request that does not decode or check;
// TUNNEL_NO_SUCH_SERVICE; TUNNEL_REFUSED when the stream's authenticated
// remote peer (the connection's, never a field of the request) is not on the
// service's allow-list; TUNNEL_BUSY at the service's or the node's connection
// bound; TUNNEL_UNAVAILABLE when its dial of the service's local address fails.
// Nothing is dialled, and no byte reaches the service, before the allow-list
// check passes. Every answer but TUNNEL_OK is followed by the end of the
// stream; detail is at most [MaxTunnelDetail] bytes.
//
// After TUNNEL_OK both sides send TunnelFrames. Each direction is a byte
// stream numbered from 0; a frame's data starts at offset. ack is cumulative:
// the bytes of the other direction received and written to the local TCP
// connection, plus one once the peer's close_write was applied (0: no
// acknowledgement in this frame). A sender keeps every byte until it is
// acknowledged and never has more than its window (1 MiB by default)
// unacknowledged: a slow reader on one end holds back the acknowledgements and
// so the writer on the other. A receiver acknowledges at least every
// [MaxTunnelData] bytes (a window is at least four times that, so the windows
// of the two sides need not match) and at once after a close_write. close_write says the sender's TCP
// side ended after offset+len(data) bytes (its receiver half-closes its own
// TCP connection, CloseWrite); reset aborts the connection (both TCP
// connections close) with a reason of at most [MaxTunnelDetail] bytes. A
// frame whose offset is beyond what the receiver has (a gap), data after a
// close_write, or an ack beyond what was sent, resets the connection. Data
// below what the receiver has is dropped (a resent frame). A side whose
// close_write was acknowledged and which applied and acknowledged the peer's
// closes the stream; the connection is over.
//
// Resume. The connecting side may move a connection to a new stream: when a
// direct connection to the peer appears while the stream runs on a relayed
// one, or when the stream fails (the relay's circuit limit, a reset). It opens
// a stream on a direct connection only and sends TunnelOpen{service,
// tunnel_id, resume: true, received}, received being its ack value. The
// exposing side answers TUNNEL_NO_SUCH_TUNNEL unless it holds a connection of
// that tunnel_id opened by the same authenticated peer, TUNNEL_BAD_REQUEST if
// received is beyond what it sent, and otherwise TUNNEL_OK{received: its own
// ack value}; it then drops the old stream. Each side resends from the other's
// received offset (or from what the other acknowledged since, if more) out of
// its retained bytes, so neither TCP connection sees the move. The exposing
// side keeps a connection whose stream failed 30 s for a resume. When the
// failed stream was relayed and no direct connection can be opened, the
// connecting side may resume once on a new relayed connection (any path is
// allowed for a resume); after that it tries direct connections for 15 s and
// otherwise closes both ends, reporting a relay cut.
package protocol
