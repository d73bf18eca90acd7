package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/localapi"
)

// fakeListenDaemon serves /v1/listen on the unix socket of a fresh data dir:
// it writes lines, then keeps the stream open until the client goes, or
// ends it at once when closeAfter is set.
func fakeListenDaemon(t testing.TB, lines []string, closeAfter bool) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovl-listen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, localapi.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/listen", func(w http.ResponseWriter, r *http.Request) {
		for _, l := range lines {
			fmt.Fprintln(w, l)
		}
		w.(http.Flusher).Flush()
		if closeAfter {
			return
		}
		<-r.Context().Done()
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return dir
}

func TestListenCountTimeout(t *testing.T) {
	msgs := []string{`{"kind":"direct","text":"a"}`, `{"kind":"group","text":"b"}`, `{"kind":"group","text":"c"}`}
	tests := []struct {
		name       string
		flags      []string
		closeAfter bool
		wantCode   int
		wantLines  int
		wantErr    string
	}{
		{name: "count reached", flags: []string{"--count", "2"}, wantCode: 0, wantLines: 2},
		{name: "count reached before timeout", flags: []string{"--count", "3", "--timeout", "30s"}, wantCode: 0, wantLines: 3},
		{name: "timeout before count", flags: []string{"--count", "5", "--timeout", "300ms"}, wantCode: 1, wantLines: 3, wantErr: "3 of 5 messages within --timeout"},
		{name: "timeout without count", flags: []string{"--timeout", "300ms"}, wantCode: 0, wantLines: 3},
		{name: "stream ends before count", flags: []string{"--count", "4"}, closeAfter: true, wantCode: 1, wantLines: 3, wantErr: "ended the stream after 3 of 4"},
		{name: "stream ends without count", closeAfter: true, wantCode: 0, wantLines: 3},
		{name: "ready printed", flags: []string{"--count", "1", "--ready"}, wantCode: 0, wantLines: 1, wantErr: "ready"},
		{name: "negative count", flags: []string{"--count", "-1"}, wantCode: 2, wantErr: "--count"},
		{name: "negative timeout", flags: []string{"--timeout", "-1s"}, wantCode: 2, wantErr: "--timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := fakeListenDaemon(t, msgs, tt.closeAfter)
			var out, errb bytes.Buffer
			start := time.Now()
			code := run(append([]string{"overlayd", "listen", "--data-dir", dir}, tt.flags...), &out, &errb)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr %q", code, tt.wantCode, errb.String())
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("listen took %v", d)
			}
			lines := strings.Split(strings.TrimSpace(out.String()), "\n")
			if out.Len() == 0 {
				lines = nil
			}
			if len(lines) != tt.wantLines {
				t.Errorf("printed %d lines, want %d: %q", len(lines), tt.wantLines, out.String())
			}
			for i, l := range lines {
				if l != msgs[i] {
					t.Errorf("line %d = %q, want %q", i, l, msgs[i])
				}
			}
			if !strings.Contains(errb.String(), tt.wantErr) {
				t.Errorf("stderr %q does not contain %q", errb.String(), tt.wantErr)
			}
		})
	}
}

func TestIdentityCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	var out1, out2, errb bytes.Buffer
	if code := run([]string{"overlayd", "identity", "--data-dir", dir}, &out1, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	st, err := os.Stat(filepath.Join(dir, "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("key mode %04o, want 0600", st.Mode().Perm())
	}
	if code := run([]string{"overlayd", "identity", "--data-dir", dir, "--json"}, &out2, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	id := strings.TrimSpace(out1.String())
	if !strings.HasPrefix(id, "12D3KooW") || !strings.Contains(out2.String(), `"peer_id": "`+id+`"`) {
		t.Errorf("identity printed %q, then %q: want the same peer ID twice", id, out2.String())
	}
	if code := run([]string{"overlayd", "identity", "--data-dir", dir, "extra"}, &out1, &errb); code != 2 {
		t.Errorf("extra argument: exit %d, want 2", code)
	}
}
