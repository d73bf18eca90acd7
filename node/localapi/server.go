package localapi

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// File names in the data dir.
const (
	SocketFile = "api.sock"
	TokenFile  = "api-token"
	// AddrFile records the TCP address when the API listens on TCP, so the
	// CLI finds it through the data dir alone.
	AddrFile = "api-addr"
)

// Listen opens the API listener: the unix socket in dataDir when addr is
// empty, else loopback TCP at addr. For TCP it writes a fresh random token
// (0600) and the address to dataDir and returns the token, which the
// handler must require.
func Listen(ctx context.Context, dataDir, addr string) (ln net.Listener, token string, err error) {
	if addr == "" {
		path := filepath.Join(dataDir, SocketFile)
		if err := removeStaleSocket(ctx, path); err != nil {
			return nil, "", err
		}
		var lc net.ListenConfig
		ln, err := lc.Listen(ctx, "unix", path)
		if err != nil {
			return nil, "", fmt.Errorf("local API socket: %w", err)
		}
		if err := os.Chmod(path, 0o600); err != nil {
			ln.Close()
			return nil, "", fmt.Errorf("local API socket: %w", err)
		}
		return ln, "", nil
	}
	var lc net.ListenConfig
	ln, err = lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("local API: %w", err)
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		ln.Close()
		return nil, "", err
	}
	token = hex.EncodeToString(b)
	if err := writePrivate(filepath.Join(dataDir, TokenFile), token); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("local API token: %w", err)
	}
	if err := writePrivate(filepath.Join(dataDir, AddrFile), ln.Addr().String()); err != nil {
		ln.Close()
		return nil, "", fmt.Errorf("local API address file: %w", err)
	}
	return ln, token, nil
}

// Cleanup removes what Listen wrote to dataDir.
func Cleanup(dataDir string) {
	for _, f := range []string{TokenFile, AddrFile} {
		os.Remove(filepath.Join(dataDir, f))
	}
}

func writePrivate(path, s string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(s+"\n"), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// removeStaleSocket removes a socket left by a daemon that died, and refuses
// to start beside a live one.
func removeStaleSocket(ctx context.Context, path string) error {
	if _, err := os.Lstat(path); err != nil {
		return nil
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(ctx, "unix", path); err == nil {
		c.Close()
		return fmt.Errorf("another overlayd is running with this data dir (%s answers)", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}

// RequireToken wraps h so that requests must carry "Authorization: Bearer
// token". An empty token means no check (the unix socket's permissions are
// the guard).
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			WriteError(w, http.StatusUnauthorized, errors.New("missing or wrong API token"))
			return
		}
		h.ServeHTTP(w, r)
	})
}

// WriteJSON writes v with status 200.
func WriteJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// WriteError writes {"error": err} with status code.
func WriteError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": strings.TrimSpace(err.Error())})
}
