// Package localapi is the daemon's control API for local programs and the
// CLI: HTTP with JSON bodies over a unix socket in the data dir (mode 0600,
// inside a 0700 directory, so only the daemon's user can reach it), or, when
// asked, over loopback TCP with a bearer token stored in the data dir.
//
// It holds both sides' shared parts: the JSON types (types.go, relay.go),
// the server helpers the daemon uses (server.go) and the Client, which has
// one method for each route. The routes themselves are registered by package
// node/api, all in one place (api.go):
//
//	Method Path                           Request      Answer           Client method
//	GET    /v1/status                     -            Status           Status
//	GET    /v1/peers                      -            []Peer           Peers
//	GET    /v1/supernodes                 -            []Supernode      Supernodes
//	GET    /v1/ring                       -            Ring             Ring
//	POST   /v1/send                       SendRequest  SendResponse     Send
//	GET    /v1/groups                     -            []string         Groups
//	POST   /v1/groups/{group}/join        {}           {}               Join
//	POST   /v1/groups/{group}/leave       {}           {}               Leave
//	POST   /v1/groups/{group}/publish     SendRequest  PublishResponse  Publish
//	GET    /v1/groups/{group}/members     -            GroupMembers     Members
//	GET    /v1/listen                     -            Inbound stream   Listen, ListenRaw
//	POST   /v1/ping                       PingRequest  PingResponse     Ping
//	POST   /v1/promote                    CertRequest  Status           Promote
//	POST   /v1/demote                     {}           Status           Demote
//	POST   /v1/revoke                     CertRequest  RevokeResponse   Revoke
//	GET    /v1/tunnels                    -                  Tunnels         Tunnels
//	POST   /v1/tunnels/expose             ExposeRequest      ExposedService  Expose
//	POST   /v1/tunnels/unexpose           UnexposeRequest    {}              Unexpose
//	POST   /v1/tunnels/connect            ConnectRequest     TunnelConnect   Connect
//	POST   /v1/tunnels/disconnect         DisconnectRequest  {}              Disconnect
//
// GET /v1/groups lists the joined groups. {group} is the group name as one
// path segment, escaped (a name with '/' or a space is fine; "", "." and
// ".." cannot be sent). A SendRequest carries its payload as Payload (bytes,
// base64 in JSON) or Text; a publish ignores its To. GET /v1/listen answers
// with a stream of Inbound, one JSON object per line (NDJSON), sent as
// messages arrive until the client goes; its headers come once the daemon
// has registered the listener. Promote, demote and revoke answer with the
// daemon's status after the change, or the revoked serial.
//
// Errors are JSON {"error": "..."} with a 4xx or 5xx status; the Client
// returns them as an *Error holding the status and that message. The
// daemon's metrics and profiles are on another listener (node
// Config.MetricsListen), not part of this API.
package localapi
