package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/overlayd/overlayd/node/localapi"
	"github.com/overlayd/overlayd/node/version"
)

// madeUpBuild is a build of a dirty checkout, as the linker would record it.
var madeUpBuild = &debug.BuildInfo{
	GoVersion: "go1.26.8",
	Main:      debug.Module{Path: "github.com/overlayd/overlayd", Version: "v0.0.0-20260102030405-0123456789ab+dirty"},
	Settings: []debug.BuildSetting{
		{Key: "vcs", Value: "git"},
		{Key: "vcs.revision", Value: "0123456789abcdef"},
		{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"},
		{Key: "vcs.modified", Value: "true"},
	},
}

func TestVersionCommand(t *testing.T) {
	const line = "overlayd version v0.0.0-20260102030405-0123456789ab+dirty (commit 0123456789abcdef+dirty at 2026-01-02T03:04:05Z, go1.26.8)\n"
	tests := []struct {
		name string
		args []string
		want string
	}{
		{name: "command", args: []string{"version"}, want: line},
		{name: "flag", args: []string{"--version"}, want: line},
		{name: "json", args: []string{"version", "--json"}, want: `{
  "version": "v0.0.0-20260102030405-0123456789ab+dirty",
  "commit": "0123456789abcdef+dirty",
  "time": "2026-01-02T03:04:05Z",
  "go": "go1.26.8"
}
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			app := newApp(&out, &errb, version.Read(madeUpBuild))
			if code := runApp(app, append([]string{"overlayd"}, tt.args...), &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			if out.String() != tt.want {
				t.Errorf("printed %q, want %q", out.String(), tt.want)
			}
		})
	}
	if got, want := version.Read(madeUpBuild).UserAgent(), "overlayd/v0.0.0-20260102030405-0123456789ab+dirty"; got != want {
		t.Errorf("agent version %q, want %q", got, want)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"overlayd", "version", "extra"}, &out, &errb); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}

func TestReorderArgs(t *testing.T) {
	app := newApp(io.Discard, io.Discard, version.Read(nil))
	tests := []struct {
		name string
		in   string
		want string
	}{
		{"send flags after", "send PEER hello --data-dir X --json", "send --data-dir X --json -- PEER hello"},
		{"send flags between", "send PEER --json hello --data-dir=X", "send --json --data-dir=X -- PEER hello"},
		{"send flags first", "send --data-dir X PEER hello", "send --data-dir X -- PEER hello"},
		{"bool with a value", "send PEER hello --json=false", "send --json=false -- PEER hello"},
		{"double dash keeps a flag-like text", "send PEER --json -- --looks-like-flag", "send --json -- PEER --looks-like-flag"},
		{"double dash first", "send -- PEER --json", "send -- PEER --json"},
		{"subcommand", "group publish G hi there --data-dir X", "group publish --data-dir X -- G hi there"},
		{"ping count", "ping PEER --count 3", "ping --count 3 -- PEER"},
		{"promote", "promote --cert F", "promote --cert F"},
		{"promote after data dir", "promote --data-dir X --json --cert F", "promote --data-dir X --json --cert F"},
		{"stdin dash is positional", "operator promote --key K --peer P -", "operator promote --key K --peer P -- -"},
		{"app flags", "--help", "--help"},
		{"unknown command", "bogus a --b", "bogus a --b"},
		{"no arguments", "status", "status"},
		{"completion flag stays last", "send PEER --generate-bash-completion", "send -- PEER --generate-bash-completion"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := reorderArgs(app, append([]string{"overlayd"}, strings.Fields(tt.in)...))
			want := append([]string{"overlayd"}, strings.Fields(tt.want)...)
			if !slices.Equal(got, want) {
				t.Errorf("reorderArgs(%q)\n got %q\nwant %q", tt.in, got, want)
			}
		})
	}
}

// fakeDaemon answers every local API request of a fresh data dir with {}
// and records each as "METHOD path body".
func fakeDaemon(t testing.TB) (dir string, got func() []string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "ovl-cli-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	ln, err := net.Listen("unix", filepath.Join(dir, localapi.SocketFile))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reqs []string
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		reqs = append(reqs, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(b)))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "{}\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return dir, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(reqs)
	}
}

func b64(s string) string {
	b, _ := json.Marshal([]byte(s))
	return string(b)
}

// TestFlagsAnywhere runs the commands that take arguments with their flags
// before, between and after the positional arguments, against a fake
// daemon, and checks what reached it.
func TestFlagsAnywhere(t *testing.T) {
	cert := filepath.Join(t.TempDir(), "cert.txt")
	if err := os.WriteFile(cert, []byte("CERT-BLOB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string // DIR stands for the data dir
		wantReq  string
		wantJSON bool
	}{
		{name: "send flags after", args: []string{"send", "PEER", "hello", "--data-dir", "DIR", "--json"},
			wantReq: `POST /v1/send {"to":"PEER","payload":` + b64("hello") + `}`, wantJSON: true},
		{name: "send flags first", args: []string{"send", "--data-dir", "DIR", "PEER", "hello"},
			wantReq: `POST /v1/send {"to":"PEER","payload":` + b64("hello") + `}`},
		{name: "send flag-like text after --", args: []string{"send", "--data-dir", "DIR", "PEER", "--", "--looks-like-flag"},
			wantReq: `POST /v1/send {"to":"PEER","payload":` + b64("--looks-like-flag") + `}`},
		{name: "send -- then flags after", args: []string{"send", "PEER", "--data-dir", "DIR", "--", "--json"},
			wantReq: `POST /v1/send {"to":"PEER","payload":` + b64("--json") + `}`},
		{name: "group publish flags after", args: []string{"group", "publish", "G", "hi", "--data-dir", "DIR"},
			wantReq: `POST /v1/groups/G/publish {"payload":` + b64("hi") + `}`},
		{name: "group publish flags between", args: []string{"group", "publish", "G", "--data-dir=DIR", "hi", "--json"},
			wantReq: `POST /v1/groups/G/publish {"payload":` + b64("hi") + `}`, wantJSON: true},
		{name: "ping count after", args: []string{"ping", "PEER", "--count", "3", "--data-dir", "DIR", "--wait", "0s"},
			wantReq: `POST /v1/ping {"peer":"PEER","count":3}`},
		{name: "promote cert", args: []string{"promote", "--cert", "CERT", "--data-dir", "DIR", "--json"},
			wantReq: `POST /v1/promote {"blob":"CERT-BLOB"}`, wantJSON: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, reqs := fakeDaemon(t)
			args := []string{"overlayd"}
			for _, a := range tt.args {
				a = strings.ReplaceAll(a, "DIR", dir)
				args = append(args, strings.ReplaceAll(a, "CERT", cert))
			}
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != 0 {
				t.Fatalf("%q: exit %d: %s", args, code, errb.String())
			}
			if got := reqs(); len(got) != 1 || got[0] != tt.wantReq {
				t.Errorf("daemon got %q, want %q", got, tt.wantReq)
			}
			if isJSON := strings.HasPrefix(out.String(), "{"); isJSON != tt.wantJSON {
				t.Errorf("printed %q: JSON %v, want %v", out.String(), isJSON, tt.wantJSON)
			}
		})
	}
	// A wrong count of arguments is still bad input, wherever the flags are.
	var out, errb bytes.Buffer
	if code := run([]string{"overlayd", "send", "PEER", "--json"}, &out, &errb); code != 2 {
		t.Errorf("send with one argument: exit %d, want 2", code)
	}
}

// TestCompletionScripts checks that each shell's script mentions every
// top-level command and a command's flags, and that an unknown shell is
// bad input.
func TestCompletionScripts(t *testing.T) {
	app := newApp(io.Discard, io.Discard, version.Read(nil))
	for _, shell := range []string{"bash", "zsh", "fish"} {
		t.Run(shell, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run([]string{"overlayd", "completion", shell}, &out, &errb); code != 0 {
				t.Fatalf("exit %d: %s", code, errb.String())
			}
			script := out.String()
			for _, c := range app.VisibleCommands() {
				if !strings.Contains(script, c.Name) {
					t.Errorf("%s script does not mention command %s", shell, c.Name)
				}
			}
			for _, want := range []string{"/group/publish", "data-dir", "auto-spare-low"} {
				if !strings.Contains(script, want) {
					t.Errorf("%s script does not mention %s", shell, want)
				}
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"overlayd", "completion", "tcsh"}, &out, &errb); code != 2 {
		t.Errorf("completion tcsh: exit %d, want 2", code)
	}
}

func TestInboundLine(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	tests := []struct {
		name string
		in   localapi.Inbound
		want string
	}{
		{"direct", localapi.Inbound{Kind: "direct", From: "P", Text: "hi", Payload: []byte("hi"), Time: at}, "03:04:05 direct from P: hi"},
		{"group", localapi.Inbound{Kind: "group", From: "P", Group: "g", Seq: 7, Text: "a\nb", Payload: []byte("a\nb"), Time: at}, `03:04:05 group g #7 from P: "a\nb"`},
		{"binary", localapi.Inbound{Kind: "direct", From: "P", Payload: []byte{0, 1}, Time: at}, "03:04:05 direct from P: (2 bytes, not text)"},
		{"gap", localapi.Inbound{Kind: "gap", Dropped: 3, Time: at}, "03:04:05 gap: 3 messages dropped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := inboundLine(tt.in); got != tt.want {
				t.Errorf("inboundLine = %q, want %q", got, tt.want)
			}
		})
	}
}
