package node

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
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
//	GET  /v1/tunnels                   Tunnels (and the routes of tunnel.go)
//	POST /v1/promote                   CertRequest (a certificate) → Status
//	POST /v1/demote                    {} → Status
//	POST /v1/revoke                    CertRequest (a revocation) → RevokeResponse
//	GET  /debug/pprof/...              Go profiles (also on a loopback metrics listener)

func (n *Node) startAPI(ctx context.Context) error {
	ln, token, err := localapi.Listen(ctx, n.cfg.DataDir, n.cfg.APIListen)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	get := func(path string, f func() any) {
		mux.HandleFunc("GET "+path, func(w http.ResponseWriter, _ *http.Request) { localapi.WriteJSON(w, f()) })
	}
	get("/v1/status", func() any { return n.Status() })
	get("/v1/peers", func() any { return n.Peers() })
	get("/v1/supernodes", func() any { return n.Supernodes() })
	get("/v1/ring", func() any { return n.RingInfo() })
	n.messagingRoutes(mux)
	mux.HandleFunc("POST /v1/ping", n.servePing)
	n.tunnelRoutes(mux)
	mux.HandleFunc("POST /v1/promote", n.servePromote)
	mux.HandleFunc("POST /v1/demote", n.serveDemote)
	mux.HandleFunc("POST /v1/revoke", n.serveRevoke)
	profileRoutes(mux)
	n.apiSrv = n.serve(ln, localapi.RequireToken(token, mux))
	n.log.Info("local API", "addr", ln.Addr().String())
	return nil
}

// messagingRoutes adds the messaging routes, served by the client.
func (n *Node) messagingRoutes(mux *http.ServeMux) {
	// withClient answers 409 on a node without a client side.
	withClient := func(f func(w http.ResponseWriter, r *http.Request, c *client.Client)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if n.client == nil {
				localapi.WriteError(w, http.StatusConflict, errNoClient)
				return
			}
			f(w, r, n.client)
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

func (n *Node) servePing(w http.ResponseWriter, r *http.Request) {
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
	res, err := n.Ping(r.Context(), target, req.Count, wait)
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

func (n *Node) servePromote(w http.ResponseWriter, r *http.Request) {
	var req localapi.CertRequest
	if !decode(w, r, &req) {
		return
	}
	raw, err := protocol.DecodeBlob(req.Blob)
	if err == nil {
		_, err = n.Promote(r.Context(), raw)
	}
	if err != nil {
		code := http.StatusBadRequest
		if errors.Is(err, ErrNotSupernode) {
			code = http.StatusConflict
		}
		localapi.WriteError(w, code, err)
		return
	}
	localapi.WriteJSON(w, n.Status())
}

func (n *Node) serveDemote(w http.ResponseWriter, r *http.Request) {
	if err := n.Demote(r.Context(), "operator"); err != nil {
		localapi.WriteError(w, http.StatusConflict, err)
		return
	}
	localapi.WriteJSON(w, n.Status())
}

func (n *Node) serveRevoke(w http.ResponseWriter, r *http.Request) {
	var req localapi.CertRequest
	if !decode(w, r, &req) {
		return
	}
	raw, err := protocol.DecodeBlob(req.Blob)
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, err)
		return
	}
	rev, err := n.Revoke(r.Context(), raw)
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
