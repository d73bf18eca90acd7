package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/overlayd/overlayd/node/client"
	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/tunnel"
)

// The tunnel routes, served by the node's tunnel manager (package
// node/tunnel).
//
//	GET  /v1/tunnels                   Tunnels
//	POST /v1/tunnels/expose            ExposeRequest → ExposedService
//	POST /v1/tunnels/unexpose          UnexposeRequest → {}
//	POST /v1/tunnels/connect           ConnectRequest → TunnelConnect
//	POST /v1/tunnels/disconnect        DisconnectRequest → {}

// tunnelRoutes adds the tunnel routes. A connect listener lives until
// lifetime ends or it is disconnected.
func tunnelRoutes(lifetime context.Context, mux *http.ServeMux, tunnels *tunnel.Manager) {
	mux.HandleFunc("GET /v1/tunnels", func(w http.ResponseWriter, _ *http.Request) {
		localapi.WriteJSON(w, tunnels.List())
	})
	mux.HandleFunc("POST /v1/tunnels/expose", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.ExposeRequest
		if !decode(w, r, &req) {
			return
		}
		var allow []peer.ID
		for _, s := range req.Allow {
			p, err := peer.Decode(s)
			if err != nil {
				localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("--allow %q is not a peer ID: %w", s, err))
				return
			}
			allow = append(allow, p)
		}
		res, err := tunnels.Expose(req.Name, req.Target, allow, req.AllowAny)
		if err != nil {
			localapi.WriteError(w, tunnelStatus(err), fmt.Errorf("expose %s: %w", req.Name, err))
			return
		}
		localapi.WriteJSON(w, res)
	})
	mux.HandleFunc("POST /v1/tunnels/unexpose", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.UnexposeRequest
		if !decode(w, r, &req) {
			return
		}
		if err := tunnels.Unexpose(req.Name); err != nil {
			localapi.WriteError(w, tunnelStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
	mux.HandleFunc("POST /v1/tunnels/connect", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.ConnectRequest
		if !decode(w, r, &req) {
			return
		}
		p, err := peer.Decode(req.Peer)
		if err != nil {
			localapi.WriteError(w, http.StatusBadRequest, fmt.Errorf("%q is not a peer ID: %w", req.Peer, err))
			return
		}
		listen := req.Listen
		if listen == "" {
			listen = "127.0.0.1:0"
		}
		res, err := tunnels.Connect(lifetime, p, req.Service, listen)
		if err != nil {
			localapi.WriteError(w, tunnelStatus(err), fmt.Errorf("connect %s/%s: %w", req.Peer, req.Service, err))
			return
		}
		localapi.WriteJSON(w, res)
	})
	mux.HandleFunc("POST /v1/tunnels/disconnect", func(w http.ResponseWriter, r *http.Request) {
		var req localapi.DisconnectRequest
		if !decode(w, r, &req) {
			return
		}
		if err := tunnels.Disconnect(req.Listen); err != nil {
			localapi.WriteError(w, tunnelStatus(err), err)
			return
		}
		localapi.WriteJSON(w, struct{}{})
	})
}

func tunnelStatus(err error) int {
	switch {
	case errors.Is(err, tunnel.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, tunnel.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, tunnel.ErrExists), errors.Is(err, tunnel.ErrLimit), errors.Is(err, tunnel.ErrClosed):
		return http.StatusConflict
	case errors.Is(err, client.ErrInvalid):
		return http.StatusBadRequest
	}
	return http.StatusInternalServerError
}
