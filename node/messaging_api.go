package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
)

// messagingRoutes adds the messaging endpoints of the local API:
//
//	POST /v1/send                      SendRequest → SendResponse
//	GET  /v1/groups                    []string (joined groups)
//	POST /v1/groups/{group}/join       {}
//	POST /v1/groups/{group}/leave      {}
//	POST /v1/groups/{group}/publish    SendRequest → PublishResponse
//	GET  /v1/groups/{group}/members    GroupMembers
//	GET  /v1/listen                    stream of Inbound, one JSON per line
func (n *Node) messagingRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/send", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.SendRequest
		if !decode(w, r, &req) {
			return
		}
		to, err := peer.Decode(req.To)
		if err != nil {
			localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("recipient %q is not a peer ID: %v", req.To, err))
			return
		}
		id, err := n.Send(r.Context(), to, payloadOf(req))
		if err != nil {
			localapi.WriteError(w, httpStatus(err), fmt.Errorf("message %s not delivered: %w", id, err))
			return
		}
		localapi.WriteJSON(w, localapi.SendResponse{ID: id, Status: "delivered"})
	})
	mux.HandleFunc("GET /v1/groups", func(w http.ResponseWriter, _ *http.Request) {
		gs := n.Groups()
		if gs == nil {
			gs = []string{}
		}
		localapi.WriteJSON(w, gs)
	})
	mux.HandleFunc("POST /v1/groups/{group}/join", func(w http.ResponseWriter, r *http.Request) {
		if err := n.JoinGroup(r.PathValue("group")); err != nil {
			localapi.WriteError(w, httpStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
	mux.HandleFunc("POST /v1/groups/{group}/leave", func(w http.ResponseWriter, r *http.Request) {
		if err := n.LeaveGroup(r.PathValue("group")); err != nil {
			localapi.WriteError(w, httpStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
	mux.HandleFunc("POST /v1/groups/{group}/publish", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.SendRequest
		if !decode(w, r, &req) {
			return
		}
		g := r.PathValue("group")
		res, err := n.Publish(r.Context(), g, payloadOf(req))
		if err != nil {
			localapi.WriteError(w, httpStatus(err), fmt.Errorf("publish to %s: %w", g, err))
			return
		}
		localapi.WriteJSON(w, localapi.PublishResponse{ID: res.ID, Group: g, Epoch: res.Epoch, Seq: res.Seq})
	})
	mux.HandleFunc("GET /v1/groups/{group}/members", func(w http.ResponseWriter, r *http.Request) {
		g := r.PathValue("group")
		ms, err := n.GroupMembers(r.Context(), g)
		if err != nil {
			localapi.WriteError(w, httpStatus(err), err)
			return
		}
		localapi.WriteJSON(w, localapi.GroupMembers{Group: g, Members: ms})
	})
	mux.HandleFunc("GET /v1/listen", func(w http.ResponseWriter, r *http.Request) {
		l, err := n.Listen()
		if err != nil {
			localapi.WriteError(w, http.StatusConflict, err)
			return
		}
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
				if enc.Encode(in) != nil {
					return
				}
				if flusher != nil {
					flusher.Flush()
				}
			}
		}
	})
}

// decode reads a JSON body of at most a payload and its envelope.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(io.LimitReader(r.Body, 2*protocol.MaxPayload+4096))
	if err == nil {
		err = json.Unmarshal(body, v)
	}
	if err != nil {
		localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("request body: %v", err))
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

// httpStatus maps messaging errors to HTTP statuses for the CLI.
func httpStatus(err error) int {
	switch {
	case errors.Is(err, ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, ErrOffline):
		return http.StatusNotFound
	case errors.Is(err, ErrUnreachable):
		return http.StatusBadGateway
	case errors.Is(err, ErrBusy), errors.Is(err, ErrNotAttached):
		return http.StatusServiceUnavailable
	case errors.Is(err, ErrNoAck):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}
