package node

import (
	"errors"
	"net/http"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/protocol"
)

// megaRoutes adds the operator endpoints of the local API:
//
//	POST /v1/promote  CertRequest (a certificate) → Status
//	POST /v1/demote   {}                         → Status
//	POST /v1/revoke   CertRequest (a revocation) → {"serial": N}
func (n *Node) megaRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /v1/promote", func(w http.ResponseWriter, r *http.Request) {
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
	})
	mux.HandleFunc("POST /v1/demote", func(w http.ResponseWriter, r *http.Request) {
		if err := n.Demote(r.Context(), "operator"); err != nil {
			localapi.WriteError(w, http.StatusConflict, err)
			return
		}
		localapi.WriteJSON(w, n.Status())
	})
	mux.HandleFunc("POST /v1/revoke", func(w http.ResponseWriter, r *http.Request) {
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
		localapi.WriteJSON(w, map[string]uint64{"serial": rev.Serial})
	})
}
