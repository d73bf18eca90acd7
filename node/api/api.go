package api

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/tunnel"
	"github.com/overlayd/overlayd/protocol"
)

// The local API: every route the daemon serves, in one place. The types
// are in package localapi, whose doc lists the routes for its users.
//
//	GET  /v1/status                    Status
//	GET  /v1/peers                     []Peer
//	GET  /v1/supernodes                []Supernode
//	GET  /v1/ring                      Ring
//	POST /v1/send                      SendRequest → SendResponse
//	GET  /v1/groups                    []string (joined groups)
//	POST /v1/groups/{group}/join       {}
//	POST /v1/groups/{group}/leave      {}
//	POST /v1/groups/{group}/publish    SendRequest → PublishResponse
//	GET  /v1/groups/{group}/members    GroupMembers
//	GET  /v1/listen                    stream of Inbound, one JSON per line
//	POST /v1/ping                      PingRequest → PingResponse
//	GET  /v1/tunnels                   Tunnels (and the routes of tunnels.go)
//	POST /v1/promote                   CertRequest (a certificate) → Status
//	POST /v1/demote                    {} → Status
//	POST /v1/revoke                    CertRequest (a revocation) → RevokeResponse
//	GET  /debug/pprof/...              Go profiles (also on a loopback metrics listener)

// Operator is what the operator's routes change: the node's certificates
// and revocations (package node/trust, through the node).
type Operator interface {
	Promote(ctx context.Context, raw []byte) (protocol.MegaCert, error)
	Demote(ctx context.Context, why string) error
	Revoke(ctx context.Context, raw []byte) (protocol.Revocation, error)
}

// Pinger pings a peer, through its supernode's relay when there is no
// direct connection (package node/circuit's Pinger).
type Pinger interface {
	Ping(ctx context.Context, target peer.ID, count int, wait time.Duration) (localapi.PingResponse, error)
}

// Config is what the local API serves. The node builds it once its parts
// exist; every field but Client is required.
type Config struct {
	// Status, Peers, Supernodes and Ring answer the read-only routes;
	// the node builds them with this package's Status, Peers, Supernodes
	// and Ring.
	Status     func() localapi.Status
	Peers      func() []localapi.Peer
	Supernodes func() []localapi.Supernode
	Ring       func() localapi.Ring
	// Client is the node's client side; nil on a pinned supernode, whose
	// messaging routes then answer 409.
	Client   *client.Client
	Tunnels  *tunnel.Manager
	Pinger   Pinger
	Operator Operator
	// Lifetime bounds what a request starts that outlives it (a tunnel
	// connect listener): the node's, done when the node closes. It is
	// not a request's context.
	Lifetime context.Context
}

// Handler returns every route of the local API, without the token check
// (localapi.RequireToken wraps it).
func Handler(c Config) (http.Handler, error) {
	if c.Status == nil || c.Peers == nil || c.Supernodes == nil || c.Ring == nil || c.Tunnels == nil || c.Pinger == nil || c.Operator == nil || c.Lifetime == nil {
		return nil, errors.New("api: incomplete Config")
	}
	mux := http.NewServeMux()
	get := func(path string, f func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) { localapi.WriteJSON(w, f()) })
	}
	get("/v1/status", func() any { return c.Status() })
	get("/v1/peers", func() any { return c.Peers() })
	get("/v1/supernodes", func() any { return c.Supernodes() })
	get("/v1/ring", func() any { return c.Ring() })
	messagingRoutes(mux, c.Client)
	mux.HandleFunc("POST /v1/ping", c.servePing)
	tunnelRoutes(c.Lifetime, mux, c.Tunnels)
	mux.HandleFunc("POST /v1/promote", c.servePromote)
	mux.HandleFunc("POST /v1/demote", c.serveDemote)
	mux.HandleFunc("POST /v1/revoke", c.serveRevoke)
	ProfileRoutes(mux)
	return mux, nil
}

// ProfileRoutes adds the Go profiles under /debug/pprof/: operators
// diagnosing a supernode need heap and goroutine profiles, and
// /debug/pprof/heap?gc=1 gives the live heap after a collection. The
// local API always serves them (behind its authentication); the node's
// metrics listener only while it is loopback.
func ProfileRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// messagingRoutes adds the messaging routes, served by the client side
// (nil on a pinned supernode).
func messagingRoutes(mux *http.ServeMux, cl *client.Client) {
	// withClient answers 409 on a node without a client side.
	withClient := func(f func(w http.ResponseWriter, r *http.Request, c *client.Client)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if cl == nil {
				localapi.WriteError(w, http.StatusConflict, errNoClient)
				return
			}
			f(w, r, cl)
		}
	}
	mux.HandleFunc("POST /v1/send", withClient(func(w http.ResponseWriter, r *http.Request, c *client.Client) {
		var req localapi.SendRequest
		if !decode(w, r, &req) {
			return
		}
		to, err := peer.Decode(req.To)
		if err != nil {
			localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("recipient %q is not a peer ID: %w", req.To, err))
			return
		}
		res, err := c.Send(r.Context(), to, payloadOf(req))
		if err != nil {
			localapi.WriteError(w, httpStatus(err), fmt.Errorf("message %x not delivered: %w", res.ID, err))
			return
		}
		resp := localapi.SendResponse{ID: hex.EncodeToString(res.ID), Status: localapi.SendDelivered}
		if res.Stored {
			resp.Status, resp.Stored, resp.Detail = localapi.SendStored, true, res.Detail
		}
		localapi.WriteJSON(w, resp)
	}))
	mux.HandleFunc("GET /v1/groups", withClient(func(w http.ResponseWriter, _ *http.Request, c *client.Client) {
		localapi.WriteJSON(w, c.Groups())
	}))
	groupOp := func(op func(*client.Client, string) error) http.HandlerFunc {
		return withClient(func(w http.ResponseWriter, r *http.Request, c *client.Client) {
			if err := op(c, r.PathValue("group")); err != nil {
				localapi.WriteError(w, httpStatus(err), err)
				return
			}
			localapi.WriteJSON(w, struct{}{})
		})
	}
	mux.HandleFunc("POST /v1/groups/{group}/join", groupOp((*client.Client).Join))
	mux.HandleFunc("POST /v1/groups/{group}/leave", groupOp((*client.Client).Leave))
	mux.HandleFunc("POST /v1/groups/{group}/publish", withClient(func(w http.ResponseWriter, r *http.Request, c *client.Client) {
		var req localapi.SendRequest
		if !decode(w, r, &req) {
			return
		}
		g := r.PathValue("group")
		res, err := c.Publish(r.Context(), g, payloadOf(req))
		if err != nil {
			localapi.WriteError(w, httpStatus(err), fmt.Errorf("publish to %s: %w", g, err))
			return
		}
		localapi.WriteJSON(w, localapi.PublishResponse{ID: hex.EncodeToString(res.ID), Group: g, Epoch: res.Epoch, Seq: res.Seq})
	}))
	mux.HandleFunc("GET /v1/groups/{group}/members", withClient(func(w http.ResponseWriter, r *http.Request, c *client.Client) {
		g := r.PathValue("group")
		ms, err := c.Members(r.Context(), g)
		if err != nil {
			localapi.WriteError(w, httpStatus(err), err)
			return
		}
		out := localapi.GroupMembers{Group: g, Members: make([]string, 0, len(ms))}
		for _, m := range ms {
			out.Members = append(out.Members, m.String())
		}
		localapi.WriteJSON(w, out)
	}))
	mux.HandleFunc("GET /v1/listen", withClient(func(w http.ResponseWriter, r *http.Request, c *client.Client) {
		l := c.Listen()
		defer l.Close()
		w.Header().Set("Content-Type", "application/x-ndjson")
		w.WriteHeader(http.StatusOK)
		flusher, _ := w.(http.Flusher)
		if flusher != nil {
			flusher.Flush()
		}
		enc := json.NewEncoder(w)
		for {
			select {
			case <-r.Context().Done():
				return
			case in := <-l.C:
				if enc.Encode(inboundJSON(in)) != nil {
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
	}))
}

// inboundJSON is in as the local API shows it.
func inboundJSON(in client.Inbound) localapi.Inbound {
	out := localapi.Inbound{Kind: in.Kind, Group: in.Group, Epoch: in.Epoch, Seq: in.Seq,
		Payload: in.Payload, Text: printable(in.Payload), Dropped: in.Dropped, Sent: in.Sent, Time: in.Time}
	if in.From != "" {
		out.From = in.From.String()
	}
	if len(in.ID) > 0 {
		out.ID = hex.EncodeToString(in.ID)
	}
	return out
}

// printable returns b as text when it is valid UTF-8 without control
// characters other than newline and tab, else "".
func printable(b []byte) string {
	s := string(b)
	for _, r := range s {
		if r == 0xfffd || (r < 0x20 && r != '\n' && r != '\t') {
			return ""
		}
	}
	return s
}

func (c Config) servePing(w http.ResponseWriter, r *http.Request) {
	var req localapi.PingRequest
	if !decode(w, r, &req) {
		return
	}
	target, err := peer.Decode(req.Peer)
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("%q is not a peer ID: %w", req.Peer, err))
		return
	}
	wait := time.Duration(min(max(req.WaitMs, 0), 60_000)) * time.Millisecond
	res, err := c.Pinger.Ping(r.Context(), target, req.Count, wait)
	if err != nil {
		status := httpStatus(err)
		if status == http.StatusInternalServerError {
			status = http.StatusBadGateway
		}
		localapi.WriteError(w, status, fmt.Errorf("ping %s: %w", target, err))
		return
	}
	localapi.WriteJSON(w, res)
}

func (c Config) servePromote(w http.ResponseWriter, r *http.Request) {
	var req localapi.CertRequest
	if !decode(w, r, &req) {
		return
	}
	raw, err := protocol.DecodeBlob(req.Blob)
	if err == nil {
		_, err = c.Operator.Promote(r.Context(), raw)
	}
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotSupernode) {
			code = http.StatusConflict
		}
		localapi.WriteError(w, code, err)
		return
	}
	localapi.WriteJSON(w, c.Status())
}

func (c Config) serveDemote(w http.ResponseWriter, r *http.Request) {
	if err := c.Operator.Demote(r.Context(), "operator"); err != nil {
		localapi.WriteError(w, http.StatusConflict, err)
		return
	}
	localapi.WriteJSON(w, c.Status())
}

func (c Config) serveRevoke(w http.ResponseWriter, r *http.Request) {
	var req localapi.CertRequest
	if !decode(w, r, &req) {
		return
	}
	raw, err := protocol.DecodeBlob(req.Blob)
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, err)
		return
	}
	rev, err := c.Operator.Revoke(r.Context(), raw)
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, err)
		return
	}
	localapi.WriteJSON(w, localapi.RevokeResponse{Serial: rev.Serial})
}

// decode reads a JSON body of at most a payload and its envelope.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 2*protocol.MaxPayload+4096))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("request body: %w", err))
		return false
	}
	return true
}

func payloadOf(req localapi.SendRequest) []byte {
	if req.Payload != nil {
		return req.Payload
	}
	return []byte(req.Text)
}

// httpStatus maps the client's errors to HTTP statuses for the CLI.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, client.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, client.ErrOffline), errors.Is(err, client.ErrNotLocated):
		return http.StatusNotFound
	case errors.Is(err, client.ErrUnreachable):
		return http.StatusBadGateway
	case errors.Is(err, client.ErrOverQuota):
		return http.StatusInsufficientStorage
	case errors.Is(err, client.ErrBusy), errors.Is(err, client.ErrNotAttached):
		return http.StatusServiceUnavailable
	case errors.Is(err, client.ErrNoAck):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
