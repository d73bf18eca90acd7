package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// requestTimeout bounds one request and its answer (not Listen, which
// lasts until its ctx ends). A ping may wait up to a minute for hole
// punching, so less would cut it short.
const requestTimeout = 60 * time.Second

// maxAnswer bounds the answer read for one request, and maxErrorBody
// that of an error answer.
const (
	maxAnswer    = 64 << 20
	maxErrorBody = 64 << 10
)

// Client talks to the daemon of one data dir. It has a method for every
// route of the API (see the package doc), so callers never write a path.
// A non-200 answer is an *Error; no daemon at the data dir is ErrNoDaemon.
type Client struct {
	hc      *http.Client
	base    string
	token   string
	dataDir string
}

// NewClient returns a client for the daemon using dataDir. If the daemon
// wrote an API address file (TCP mode), the client uses TCP with the token;
// otherwise the unix socket. It does no I/O beyond reading those two files.
func NewClient(dataDir string) *Client {
	c := &Client{dataDir: dataDir}
	addr, errA := os.ReadFile(filepath.Join(dataDir, AddrFile))
	tok, errT := os.ReadFile(filepath.Join(dataDir, TokenFile))
	if errA == nil && errT == nil {
		c.base = "http://" + strings.TrimSpace(string(addr))
		c.token = strings.TrimSpace(string(tok))
		c.hc = &http.Client{}
		return c
	}
	sock := filepath.Join(dataDir, SocketFile)
	c.base = "http://overlayd"
	c.hc = &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
	}}
	return c
}

// Status returns the daemon's status: GET /v1/status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.get(ctx, "/v1/status", &s)
}

// Peers returns the connected peers: GET /v1/peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var p []Peer
	return p, c.get(ctx, "/v1/peers", &p)
}

// Supernodes returns the directory: GET /v1/supernodes.
func (c *Client) Supernodes(ctx context.Context) ([]Supernode, error) {
	var s []Supernode
	return s, c.get(ctx, "/v1/supernodes", &s)
}

// Ring returns the live ring: GET /v1/ring.
func (c *Client) Ring(ctx context.Context) (Ring, error) {
	var r Ring
	return r, c.get(ctx, "/v1/ring", &r)
}

// Send sends payload to peer to (a peer ID) and returns once the recipient
// acknowledged it, or its home cluster stored it while it is offline
// (SendResponse.Stored): POST /v1/send. A message the daemon refused or
// could not deliver is an *Error (400: an invalid request, such as a bad
// peer ID or a payload too large; 404: recipient offline and not stored;
// 502: unreachable; 503: busy or not attached; 504: no acknowledgement;
// 507: offline and its home cluster's store is over quota).
func (c *Client) Send(ctx context.Context, to string, payload []byte) (SendResponse, error) {
	var r SendResponse
	return r, c.post(ctx, "/v1/send", SendRequest{To: to, Payload: payload}, &r)
}

// Groups returns the groups this node has joined: GET /v1/groups.
func (c *Client) Groups(ctx context.Context) ([]string, error) {
	var gs []string
	return gs, c.get(ctx, "/v1/groups", &gs)
}

// Join joins group, and keeps it joined across failovers until Leave:
// POST /v1/groups/{group}/join.
func (c *Client) Join(ctx context.Context, group string) error {
	p, err := groupPath(group, "join")
	if err != nil {
		return err
	}
	return c.post(ctx, p, struct{}{}, nil)
}

// Leave leaves group: POST /v1/groups/{group}/leave.
func (c *Client) Leave(ctx context.Context, group string) error {
	p, err := groupPath(group, "leave")
	if err != nil {
		return err
	}
	return c.post(ctx, p, struct{}{}, nil)
}

// Publish publishes payload to every member of group and returns the place
// the group's home gave it: POST /v1/groups/{group}/publish. The node need
// not have joined group.
func (c *Client) Publish(ctx context.Context, group string, payload []byte) (PublishResponse, error) {
	var r PublishResponse
	p, err := groupPath(group, "publish")
	if err != nil {
		return r, err
	}
	return r, c.post(ctx, p, SendRequest{Payload: payload}, &r)
}

// Members returns group's members as its home supernode knows them:
// GET /v1/groups/{group}/members.
func (c *Client) Members(ctx context.Context, group string) (GroupMembers, error) {
	var r GroupMembers
	p, err := groupPath(group, "members")
	if err != nil {
		return r, err
	}
	return r, c.get(ctx, p, &r)
}

// Ping reaches a peer, through its supernode's relay when there is no
// direct connection, and pings it: POST /v1/ping.
func (c *Client) Ping(ctx context.Context, req PingRequest) (PingResponse, error) {
	var r PingResponse
	return r, c.post(ctx, "/v1/ping", req, &r)
}

// Promote makes the daemon, a supernode, a mega-supernode with cert, an
// operator certificate in its text form (protocol.EncodeBlob), and returns
// the daemon's status after: POST /v1/promote.
func (c *Client) Promote(ctx context.Context, cert string) (Status, error) {
	var s Status
	return s, c.post(ctx, "/v1/promote", CertRequest{Blob: cert}, &s)
}

// Demote returns a mega-supernode to a regular supernode and returns the
// daemon's status after: POST /v1/demote.
func (c *Client) Demote(ctx context.Context) (Status, error) {
	var s Status
	return s, c.post(ctx, "/v1/demote", struct{}{}, &s)
}

// Revoke applies revocation, a signed revocation in its text form
// (protocol.EncodeBlob), on the daemon, which spreads it to the network:
// POST /v1/revoke.
func (c *Client) Revoke(ctx context.Context, revocation string) (RevokeResponse, error) {
	var r RevokeResponse
	return r, c.post(ctx, "/v1/revoke", CertRequest{Blob: revocation}, &r)
}

// Listen passes each message the daemon receives to each, in order, until
// ctx ends or the daemon ends the stream (both return nil) or each returns
// an error (Listen returns it): GET /v1/listen. When ready is not nil,
// Listen calls it once the daemon has registered the listener: every
// message that reaches the daemon after ready returns is passed to each.
// A daemon that cannot listen (a supernode) answers with an *Error, 409.
func (c *Client) Listen(ctx context.Context, ready func(), each func(Inbound) error) error {
	return c.ListenRaw(ctx, ready, func(m json.RawMessage) error {
		var in Inbound
		if err := json.Unmarshal(m, &in); err != nil {
			return fmt.Errorf("listen: decode message: %w", err)
		}
		return each(in)
	})
}

// ListenRaw is Listen passing each message as the daemon sent it, one JSON
// object without its newline. It is for programs that pass the messages on
// unchanged (the CLI's listen): decoding into Inbound and encoding again
// would drop fields a newer daemon adds and always add "time".
func (c *Client) ListenRaw(ctx context.Context, ready func(), each func(json.RawMessage) error) error {
	const path = "/v1/listen"
	resp, err := c.open(ctx, http.MethodGet, path, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	// The daemon sends the headers after it registered the listener.
	if ready != nil {
		ready()
	}
	return decodeStream(ctx, resp.Body, each)
}

// decodeStream passes each JSON value of r to each until r ends, ctx
// ends (both nil) or each returns an error (returned).
func decodeStream(ctx context.Context, r io.Reader, each func(json.RawMessage) error) error {
	dec := json.NewDecoder(r)
	for {
		var m json.RawMessage
		if err := dec.Decode(&m); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("listen: %w", err)
		}
		if err := each(m); err != nil {
			return err
		}
	}
}

// groupPath returns the path of a group route: the group name is one path
// segment, escaped. The names "", "." and ".." cannot be one (an HTTP
// server cleans them out of the path), so they are refused here.
func groupPath(group, op string) (string, error) {
	switch group {
	case "", ".", "..":
		return "", fmt.Errorf("group name %q cannot be sent to the daemon", group)
	}
	return "/v1/groups/" + url.PathEscape(group) + "/" + op, nil
}

// get fetches path into out.
func (c *Client) get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

// post sends in as JSON to path and decodes the answer into out, or
// discards it when out is nil.
func (c *Client) post(ctx context.Context, path string, in, out any) error {
	return c.do(ctx, http.MethodPost, path, in, out)
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := c.open(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return answerError(resp)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return fmt.Errorf("local API %s: %w", path, err)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("local API %s: decode: %w", path, err)
	}
	return nil
}

// open sends a request and returns the response, mapping a refused dial to
// ErrNoDaemon.
func (c *Client) open(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, fmt.Errorf("local API %s: encode: %w", path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, fmt.Errorf("local API %s: %w", path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		var ne *net.OpError
		if errors.As(err, &ne) && ne.Op == "dial" {
			return nil, fmt.Errorf("%w with data dir %s", ErrNoDaemon, c.dataDir)
		}
		return nil, fmt.Errorf("local API %s: %w", path, err)
	}
	return resp, nil
}

// answerError turns a non-200 answer into an *Error with the daemon's
// message, or the HTTP status when the body has none.
func answerError(resp *http.Response) error {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var e struct {
		Error string `json:"error"`
	}
	msg := resp.Status
	if json.Unmarshal(body, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	return &Error{Status: resp.StatusCode, Message: msg}
}

// Tunnels lists this node's exposed services and connect listeners:
// GET /v1/tunnels.
func (c *Client) Tunnels(ctx context.Context) (Tunnels, error) {
	var r Tunnels
	return r, c.get(ctx, "/v1/tunnels", &r)
}

// Expose makes a local TCP service reachable by name by the peers req
// allows: POST /v1/tunnels/expose.
func (c *Client) Expose(ctx context.Context, req ExposeRequest) (ExposedService, error) {
	var r ExposedService
	return r, c.post(ctx, "/v1/tunnels/expose", req, &r)
}

// Unexpose stops exposing the service name and closes its open
// connections: POST /v1/tunnels/unexpose.
func (c *Client) Unexpose(ctx context.Context, name string) error {
	return c.post(ctx, "/v1/tunnels/unexpose", UnexposeRequest{Name: name}, nil)
}

// Connect opens a local listener whose connections are carried to a
// service another peer exposes, and returns it with the address it
// listens on: POST /v1/tunnels/connect.
func (c *Client) Connect(ctx context.Context, req ConnectRequest) (TunnelConnect, error) {
	var r TunnelConnect
	return r, c.post(ctx, "/v1/tunnels/connect", req, &r)
}

// Disconnect closes the connect listener on listen and its open
// connections: POST /v1/tunnels/disconnect.
func (c *Client) Disconnect(ctx context.Context, listen string) error {
	return c.post(ctx, "/v1/tunnels/disconnect", DisconnectRequest{Listen: listen}, nil)
}
