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
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrNoDaemon means no daemon answered at the data dir.
var ErrNoDaemon = errors.New("no overlayd daemon is running")

// Client talks to the daemon of one data dir.
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

// Get fetches path into out.
func (c *Client) Get(ctx context.Context, path string, out any) error {
	return c.do(ctx, http.MethodGet, path, nil, out)
}

// Post sends in as JSON to path and decodes the answer into out.
func (c *Client) Post(ctx context.Context, path string, in, out any) error {
	return c.do(ctx, http.MethodPost, path, in, out)
}

// open sends a request and returns the response, mapping a refused dial to
// ErrNoDaemon.
func (c *Client) open(ctx context.Context, method, path string, in any) (*http.Response, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return nil, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return nil, err
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

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	resp, err := c.open(ctx, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("local API %s: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("daemon: %s", e.Error)
		}
		return fmt.Errorf("local API %s: %s", path, resp.Status)
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("local API %s: decode: %w", path, err)
	}
	return nil
}

// Listen streams inbound messages (one JSON object per line) to each,
// until ctx ends or the daemon stops.
func (c *Client) Listen(ctx context.Context, each func(json.RawMessage) error) error {
	return c.ListenReady(ctx, nil, each)
}

// ListenReady is Listen that calls ready (if not nil) once the daemon has
// registered the listener: every message that arrives at the daemon after
// ready returns is passed to each.
func (c *Client) ListenReady(ctx context.Context, ready func(), each func(json.RawMessage) error) error {
	resp, err := c.open(ctx, http.MethodGet, "/v1/listen", nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		var e struct{ Error string }
		if json.Unmarshal(body, &e) == nil && e.Error != "" {
			return fmt.Errorf("daemon: %s", e.Error)
		}
		return fmt.Errorf("local API /v1/listen: %s", resp.Status)
	}
	// The daemon sends the headers after it registered the listener.
	if ready != nil {
		ready()
	}
	dec := json.NewDecoder(resp.Body)
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

// Status returns the daemon's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var s Status
	return s, c.Get(ctx, "/v1/status", &s)
}

// Peers returns the connected peers.
func (c *Client) Peers(ctx context.Context) ([]Peer, error) {
	var p []Peer
	return p, c.Get(ctx, "/v1/peers", &p)
}

// Supernodes returns the directory.
func (c *Client) Supernodes(ctx context.Context) ([]Supernode, error) {
	var s []Supernode
	return s, c.Get(ctx, "/v1/supernodes", &s)
}

// Ring returns the live ring.
func (c *Client) Ring(ctx context.Context) (Ring, error) {
	var r Ring
	return r, c.Get(ctx, "/v1/ring", &r)
}
