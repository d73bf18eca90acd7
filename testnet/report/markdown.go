package report

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// WriteMarkdown writes dir/report.md, the human summary of r: the
// scenario, PASS or FAIL, seed, versions, the network's configuration,
// the criteria (name, want, got, pass), the figures sorted by name, the
// events in time order, and each of plots embedded by a link relative to dir
// (filepath.Base) with a sentence on what to look at. It returns the
// file's path. Figures are rounded to six significant digits; report.json
// holds them exactly.
func WriteMarkdown(r *Report, dir string, plots []string) (string, error) {
	if r == nil {
		return "", errors.New("report: markdown: nil report")
	}
	var b strings.Builder
	verdict := "FAIL"
	if r.Passed {
		verdict = "PASS"
	}
	name := r.Scenario
	if name == "" {
		name = "(unnamed scenario)"
	}
	fmt.Fprintf(&b, "# Scenario %s: %s\n\n", mdText(name), verdict)
	fmt.Fprintf(&b, "- Seed: `%#x` (%d)\n", r.Seed, r.Seed)
	fmt.Fprintf(&b, "- Duration: %s s, %d samples, %d events\n", mdNumber(r.DurationSeconds), len(r.Samples), len(r.Events))
	fmt.Fprintf(&b, "- Versions: overlayd %s, Go %s, go-libp2p %s\n", mdOr(r.Versions.Overlayd), mdOr(r.Versions.Go), mdOr(r.Versions.Libp2p))
	fmt.Fprintf(&b, "- Report schema: %d\n\n", r.Schema)

	b.WriteString("## Configuration\n\n| setting | value |\n|---|---:|\n")
	for _, row := range [][2]string{
		{"supernodes", strconv.Itoa(r.Config.Supernodes)},
		{"clients", strconv.Itoa(r.Config.Clients)},
		{"megas", strconv.Itoa(r.Config.Megas)},
		{"capacity (clients per supernode)", strconv.Itoa(r.Config.Capacity)},
		{"announce interval (s)", mdNumber(r.Config.AnnounceIntervalSeconds)},
		{"keepalive (s)", mdNumber(r.Config.KeepaliveSeconds)},
	} {
		fmt.Fprintf(&b, "| %s | %s |\n", row[0], row[1])
	}

	b.WriteString("\n## Criteria\n\n")
	if len(r.Criteria) == 0 {
		b.WriteString("No criteria were checked.\n")
	} else {
		b.WriteString("| criterion | want | got | pass |\n|---|---|---|---|\n")
		for _, c := range r.Criteria {
			pass := "FAIL"
			if c.Pass {
				pass = "PASS"
			}
			fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", mdText(c.Name), mdText(c.Want), mdText(c.Got), pass)
		}
	}

	b.WriteString("\n## Figures\n\n")
	if len(r.Figures) == 0 {
		b.WriteString("No figures were recorded.\n")
	} else {
		names := make([]string, 0, len(r.Figures))
		for n := range r.Figures {
			names = append(names, n)
		}
		slices.Sort(names)
		b.WriteString("| figure | value |\n|---|---:|\n")
		for _, n := range names {
			fmt.Fprintf(&b, "| %s | %s |\n", mdText(n), mdNumber(r.Figures[n]))
		}
	}

	b.WriteString("\n## Events\n\n")
	if len(r.Events) == 0 {
		b.WriteString("The scenario did not act on the network.\n")
	} else {
		events := slices.Clone(r.Events)
		slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.T, b.T) })
		b.WriteString("| t (s) | kind | detail |\n|---:|---|---|\n")
		for _, e := range events {
			fmt.Fprintf(&b, "| %s | %s | %s |\n", mdNumber(e.T), mdText(e.Kind), mdText(e.Detail))
		}
	}

	b.WriteString("\n## Plots\n\nTimes are seconds since the run began; dashed vertical lines are the events above, with partitions shaded until their heal.\n")
	if len(r.Samples) == 0 {
		b.WriteString("No samples were recorded, so the plots have empty axes.\n")
	}
	for _, p := range plots {
		base := filepath.Base(p)
		fmt.Fprintf(&b, "\n![%s](%s)\n\n%s\n", mdText(base), url.PathEscape(base), mdPlotCaption(base))
	}

	path := filepath.Join(dir, "report.md")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("report: markdown: %w", err)
	}
	return path, nil
}

// mdPlotCaption is the sentence under a plot saying what to look at.
func mdPlotCaption(base string) string {
	switch base {
	case "attached.png":
		return "Attached clients (solid blue) should stay on live clients (dashed grey): look at how deep each dip after a kill or partition goes and how long attached takes to climb back, and at live supernodes (green) falling and returning with kills and restarts."
	case "load.png":
		return "Each line is one supernode's attached clients (megas dashed; a cross where a node stopped being live): look for lines above their capacity line, for the survivors taking over a killed node's clients, and for load moving back after restarts and hand-backs."
	case "rates.png":
		return "Deliveries per second (top, with sends for reference) should hold through the events, and BUSY refusals per second (bottom) should be short bursts after kills and storms that fall back to zero."
	}
	return "A plot of the run over time."
}

// mdText makes s safe inside a markdown table cell or heading: pipes are
// escaped and line breaks become spaces.
func mdText(s string) string {
	s = strings.ReplaceAll(s, "\\", "\\\\")
	s = strings.ReplaceAll(s, "|", "\\|")
	s = strings.ReplaceAll(s, "\r\n", " ")
	return strings.NewReplacer("\n", " ", "\r", " ").Replace(s)
}

// mdOr is s for a table, or "unknown" when s is empty.
func mdOr(s string) string {
	if s == "" {
		return "unknown"
	}
	return mdText(s)
}

// mdNumber formats v: whole numbers exactly, others to six significant
// digits.
func mdNumber(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'g', 6, 64)
}
