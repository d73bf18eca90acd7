package testnet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// writeReport writes v as $OVERLAYD_REPORT_DIR/name and appends it as one
// line to runsFile there, so medians survive -count; without
// OVERLAYD_REPORT_DIR it does nothing. Shared by the benchmarks' reports.
func writeReport(b *testing.B, runsFile, name string, v any) {
	b.Helper()
	dir := os.Getenv("OVERLAYD_REPORT_DIR")
	if dir == "" {
		return
	}
	buf, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		err = os.MkdirAll(dir, 0o755)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(dir, name), append(buf, '\n'), 0o644)
	}
	var line []byte
	if err == nil {
		line, err = json.Marshal(map[string]any{"file": name, "at": time.Now().UTC(), "report": v})
	}
	if err == nil {
		var f *os.File
		if f, err = os.OpenFile(filepath.Join(dir, runsFile), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
			_, err = f.Write(append(line, '\n'))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		b.Errorf("report %s: %v", name, err)
	}
}
