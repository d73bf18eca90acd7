package overlayd_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// benchDoc is the reference page whose commands are checked. The dated runs
// in docs/bench-log/ are history and are not: a benchmark renamed since
// keeps its old name there.
const benchDoc = "docs/BENCHMARKS.md"

// docCmd is one shell command line found in the page: in a fenced or
// indented code block, or in an inline code span.
type docCmd struct {
	line  int    // 1-based line in the page where it starts
	text  string // the command, continuation lines joined
	block int    // lines of one code block share it, and so their working directory; 0 for a code span
}

func (c docCmd) String() string { return fmt.Sprintf("%s:%d: `%s`", benchDoc, c.line, c.text) }

var codeSpan = regexp.MustCompile("`([^`]+)`")

// docCommands returns the command lines of a Markdown page. Lines of one
// code block share a working directory, so a `cd bench` line applies to
// the lines after it; an inline code span stands alone.
func docCommands(md string) []docCmd {
	var cmds []docCmd
	lines := strings.Split(md, "\n")
	inFence := false
	prevBlank := true
	blocks := 0
	var block []docCmd // the current block's lines, joined on a trailing backslash
	flush := func() {
		blocks++
		for _, c := range block {
			c.block = blocks
			cmds = append(cmds, c)
		}
		block = nil
	}
	addBlockLine := func(i int, l string) {
		l = strings.TrimSpace(l)
		if n := len(block); n > 0 && strings.HasSuffix(block[n-1].text, "\\") {
			block[n-1].text = strings.TrimSpace(strings.TrimSuffix(block[n-1].text, "\\")) + " " + l
			return
		}
		if l != "" {
			block = append(block, docCmd{line: i + 1, text: l})
		}
	}
	inIndented := false
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			if inFence || inIndented {
				flush()
				inIndented = false
			}
			inFence = !inFence
		case inFence:
			addBlockLine(i, l)
		case strings.HasPrefix(l, "    ") && (prevBlank || inIndented) && !strings.HasPrefix(trimmed, "- ") && !strings.HasPrefix(trimmed, "|"):
			inIndented = true
			addBlockLine(i, l)
		default:
			if inIndented && trimmed != "" {
				inIndented = false
				flush()
			}
			for _, m := range codeSpan.FindAllStringSubmatch(l, -1) {
				// a | inside a table cell is escaped as \|
				cmds = append(cmds, docCmd{line: i + 1, text: strings.ReplaceAll(m[1], `\|`, "|")})
			}
		}
		prevBlank = trimmed == ""
	}
	flush()
	return cmds
}

// shellWords splits a command line into words as a POSIX shell would for
// these pages: single and double quotes, backslash escapes, # comments,
// and the operators && || | ; ( ) as words of their own.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	end := func() {
		if inWord {
			words = append(words, cur.String())
			cur.Reset()
			inWord = false
		}
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\'':
			j := strings.IndexByte(s[i+1:], '\'')
			if j < 0 {
				j = len(s) - i - 1
			}
			cur.WriteString(s[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '"':
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				cur.WriteByte(s[i])
			}
			inWord = true
		case c == '\\' && i+1 < len(s):
			i++
			cur.WriteByte(s[i])
			inWord = true
		case c == ' ' || c == '\t':
			end()
		case c == '#' && !inWord:
			end()
			return words
		case c == '&' || c == '|' || c == ';' || c == '(' || c == ')':
			end()
			op := string(c)
			if (c == '&' || c == '|') && i+1 < len(s) && s[i+1] == c {
				op += string(c)
				i++
			}
			words = append(words, op)
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	end()
	return words
}

// shellCommand is one simple command of a line and the directory it runs in.
type shellCommand struct {
	words []string
	dir   string // relative to the repository root
}

// shellSegments splits a command line into its simple commands, starting
// in dir, and returns them with the directory after the line. A `cd X`
// changes the directory of what follows it, unless inside parentheses
// (a subshell), where it lasts until the closing one.
func shellSegments(line, dir string) ([]shellCommand, string) {
	var segs []shellCommand
	var cur []string
	var stack []string
	end := func() {
		if len(cur) > 0 {
			segs = append(segs, shellCommand{words: cur, dir: dir})
			if cur[0] == "cd" && len(cur) > 1 {
				dir = path.Clean(path.Join(dir, cur[1]))
			}
		}
		cur = nil
	}
	for _, w := range shellWords(line) {
		switch w {
		case "(":
			end()
			stack = append(stack, dir)
		case ")":
			end()
			if n := len(stack); n > 0 {
				dir, stack = stack[n-1], stack[:n-1]
			}
		case "&&", "||", "|", ";", "&":
			end()
		default:
			cur = append(cur, w)
		}
	}
	end()
	return segs, dir
}

var envAssign = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// stripWrappers drops environment assignments, redirections and the
// commands that only run another (sudo, nice, taskset, timeout, time).
func stripWrappers(seg []string) []string {
	var out []string
	for i := 0; i < len(seg); i++ {
		w := seg[i]
		if w == ">" || w == ">>" || w == "<" || w == "2>" {
			i++
			continue
		}
		if strings.HasPrefix(w, ">") || strings.HasPrefix(w, "2>") {
			continue
		}
		out = append(out, w)
	}
	for len(out) > 0 {
		switch {
		case envAssign.MatchString(out[0]):
			out = out[1:]
		case out[0] == "sudo" || out[0] == "time":
			out = out[1:]
		case out[0] == "nice" && len(out) > 2 && out[1] == "-n",
			out[0] == "taskset" && len(out) > 2 && out[1] == "-c":
			out = out[3:]
		case out[0] == "timeout" && len(out) > 1:
			out = out[2:]
		case out[0] == "/usr/bin/time":
			out = out[1:]
			for len(out) > 0 && strings.HasPrefix(out[0], "-") {
				if out[0] == "-f" || out[0] == "-o" {
					out = out[1:]
				}
				out = out[1:]
			}
		default:
			return out
		}
	}
	return out
}

// goTestValueFlags are the go test and test-binary flags that take a value.
var goTestValueFlags = map[string]bool{
	"run": true, "bench": true, "benchtime": true, "count": true, "timeout": true,
	"cpu": true, "o": true, "cpuprofile": true, "memprofile": true, "blockprofile": true,
	"mutexprofile": true, "trace": true, "tags": true, "shuffle": true, "p": true,
	"parallel": true, "coverprofile": true, "outputdir": true, "exec": true, "fuzz": true,
	"fuzztime": true, "list": true, "skip": true, "ldflags": true, "gcflags": true, "vet": true,
	"covermode": true, "coverpkg": true, "mod": true,
}

// goTestCmd is a parsed `go test` command.
type goTestCmd struct {
	run, bench string
	hasRun     bool
	hasBench   bool
	pkgs       []string
}

func parseGoTest(args []string) goTestCmd {
	var g goTestCmd
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			g.pkgs = append(g.pkgs, a)
			continue
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.TrimPrefix(name, "test.")
		if !hasVal && goTestValueFlags[name] && i+1 < len(args) {
			i++
			val = args[i]
		}
		switch name {
		case "run":
			g.run, g.hasRun = val, true
		case "bench":
			g.bench, g.hasBench = val, true
		}
	}
	return g
}

// splitTestRegexp splits a -run or -bench pattern into its levels as
// package testing does: at slashes outside brackets and parentheses.
func splitTestRegexp(s string) []string {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[', '(':
			depth++
		case ']', ')':
			depth--
		case '\\':
			i++
		case '/':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	return append(parts, s[start:])
}

// testFuncs returns the top-level Test, Benchmark, Example and Fuzz
// functions of the _test.go files in dir, by prefix.
func testFuncs(dir string) (map[string][]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	funcs := map[string][]string{}
	fset := token.NewFileSet()
	goFiles := 0
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		goFiles++
		if !strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil {
				continue
			}
			for _, p := range []string{"Test", "Benchmark", "Example", "Fuzz"} {
				if strings.HasPrefix(fd.Name.Name, p) {
					funcs[p] = append(funcs[p], fd.Name.Name)
				}
			}
		}
	}
	if goFiles == 0 {
		return nil, fmt.Errorf("no .go files in %s", dir)
	}
	return funcs, nil
}

// checkPattern reports whether the top level of a -run or -bench pattern
// matches one of names. Sub-test and sub-benchmark levels are named at run
// time and are not checked.
func checkPattern(flag, pattern string, names []string, dir string) error {
	top := splitTestRegexp(pattern)[0]
	re, err := regexp.Compile(top)
	if err != nil {
		return fmt.Errorf("-%s %q: %v", flag, pattern, err)
	}
	for _, n := range names {
		if re.MatchString(n) {
			return nil
		}
	}
	kind := "Benchmark"
	if flag == "run" {
		kind = "Test, Example or Fuzz"
	}
	return fmt.Errorf("-%s %q: %q matches no func %s... in the _test.go files of %s", flag, pattern, top, kind, dir)
}

func checkGoTest(root, cwd string, args []string) []error {
	g := parseGoTest(args)
	if len(g.pkgs) == 0 {
		g.pkgs = []string{"."}
	}
	var errs []error
	for _, p := range g.pkgs {
		if strings.Contains(p, "...") {
			continue // every package: nothing to match a pattern against
		}
		dir := filepath.Join(root, cwd, p)
		funcs, err := testFuncs(dir)
		if err != nil {
			errs = append(errs, fmt.Errorf("package %s (run in %s): %v", p, cwd, err))
			continue
		}
		rel, _ := filepath.Rel(root, dir)
		if g.hasBench {
			if err := checkPattern("bench", g.bench, funcs["Benchmark"], rel); err != nil {
				errs = append(errs, err)
			}
		}
		// -run '^$' is the idiom for "no tests, only the benchmarks"
		if g.hasRun && g.run != "^$" {
			names := append(append(append([]string(nil), funcs["Test"]...), funcs["Example"]...), funcs["Fuzz"]...)
			if err := checkPattern("run", g.run, names, rel); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// cliCmd is one urfave/cli command of cmd/overlayd, read from its source.
type cliCmd struct {
	name  string
	names []string        // name and aliases
	flags map[string]bool // flag names and aliases → takes no value (bool)
	subs  []*cliCmd
	line  string // where it is defined, for messages
}

func (c *cliCmd) sub(name string) *cliCmd {
	for _, s := range c.subs {
		for _, n := range s.names {
			if n == name {
				return s
			}
		}
	}
	return nil
}

// cliSource resolves cmd/overlayd's command tree from its syntax: command
// literals (&cli.Command{...}, or elided in a []*cli.Command), functions
// returning one (with string arguments bound to their parameters), flag
// literals, package-level flag variables and functions returning a flag.
type cliSource struct {
	fset  *token.FileSet
	funcs map[string]*ast.FuncDecl
	vars  map[string]ast.Expr
}

func loadCLI(tb testing.TB, dir string) *cliCmd {
	tb.Helper()
	s := &cliSource{fset: token.NewFileSet(), funcs: map[string]*ast.FuncDecl{}, vars: map[string]ast.Expr{}}
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	var files []*ast.File
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(s.fset, filepath.Join(dir, e.Name()), nil, parser.SkipObjectResolution)
		if err != nil {
			tb.Fatal(err)
		}
		files = append(files, f)
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					s.funcs[d.Name.Name] = d
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					if vs, ok := sp.(*ast.ValueSpec); ok {
						for i, n := range vs.Names {
							if i < len(vs.Values) {
								s.vars[n.Name] = vs.Values[i]
							}
						}
					}
				}
			}
		}
	}
	var app *ast.CompositeLit
	for _, f := range files {
		ast.Inspect(f, func(n ast.Node) bool {
			if cl, ok := n.(*ast.CompositeLit); ok && app == nil && isCLIType(cl.Type, "App") {
				app = cl
			}
			return app == nil
		})
	}
	if app == nil {
		tb.Fatalf("%s: no cli.App literal", dir)
	}
	root := &cliCmd{name: "overlayd", names: []string{"overlayd"}, flags: map[string]bool{"help": true, "h": true, "version": true, "v": true}}
	for _, kv := range app.Elts {
		kv, ok := kv.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch keyName(kv) {
		case "Flags":
			s.addFlags(root.flags, kv.Value, nil)
		case "Commands":
			root.subs = s.commandList(kv.Value, nil)
		}
	}
	return root
}

func keyName(kv *ast.KeyValueExpr) string {
	if id, ok := kv.Key.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// isCLIType reports whether t is cli.<name>, or ends in name when name is
// "Flag" (cli.StringFlag, cli.BoolFlag, ...).
func isCLIType(t ast.Expr, name string) bool {
	sel, ok := t.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "cli" {
		return false
	}
	if name == "Flag" {
		return strings.HasSuffix(sel.Sel.Name, "Flag")
	}
	return sel.Sel.Name == name
}

func unparen(e ast.Expr) ast.Expr {
	for {
		switch x := e.(type) {
		case *ast.UnaryExpr:
			if x.Op != token.AND {
				return e
			}
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		default:
			return e
		}
	}
}

// str evaluates a string expression: a literal, or a parameter bound to one.
func (s *cliSource) str(e ast.Expr, env map[string]ast.Expr) (string, bool) {
	switch x := unparen(e).(type) {
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			v, err := strconv.Unquote(x.Value)
			return v, err == nil
		}
	case *ast.Ident:
		if b, ok := env[x.Name]; ok {
			return s.str(b, nil)
		}
	}
	return "", false
}

// call resolves a call of a package function: its declaration and its
// parameters bound to the call's arguments.
func (s *cliSource) call(e ast.Expr, env map[string]ast.Expr) (*ast.FuncDecl, map[string]ast.Expr) {
	ce, ok := unparen(e).(*ast.CallExpr)
	if !ok {
		return nil, nil
	}
	fun := ce.Fun
	switch f := fun.(type) {
	case *ast.IndexExpr:
		fun = f.X
	case *ast.IndexListExpr:
		fun = f.X
	}
	id, ok := fun.(*ast.Ident)
	if !ok {
		return nil, nil
	}
	fd := s.funcs[id.Name]
	if fd == nil || fd.Body == nil {
		return nil, nil
	}
	bound := map[string]ast.Expr{}
	i := 0
	for _, p := range fd.Type.Params.List {
		for _, n := range p.Names {
			if i < len(ce.Args) {
				arg := ce.Args[i]
				if id, ok := arg.(*ast.Ident); ok && env[id.Name] != nil {
					arg = env[id.Name]
				}
				bound[n.Name] = arg
			}
			i++
		}
	}
	return fd, bound
}

// firstLit returns the first composite literal in body (outermost first)
// whose type satisfies match.
func firstLit(body ast.Node, match func(ast.Expr) bool) *ast.CompositeLit {
	var found *ast.CompositeLit
	ast.Inspect(body, func(n ast.Node) bool {
		if found != nil {
			return false
		}
		if cl, ok := n.(*ast.CompositeLit); ok && match(cl.Type) {
			found = cl
			return false
		}
		return true
	})
	return found
}

func (s *cliSource) commandList(e ast.Expr, env map[string]ast.Expr) []*cliCmd {
	cl, ok := unparen(e).(*ast.CompositeLit)
	if !ok {
		return nil
	}
	var cmds []*cliCmd
	for _, el := range cl.Elts {
		if c := s.command(el, env); c != nil {
			cmds = append(cmds, c)
		}
	}
	return cmds
}

func (s *cliSource) command(e ast.Expr, env map[string]ast.Expr) *cliCmd {
	e = unparen(e)
	if _, ok := e.(*ast.CallExpr); ok {
		fd, bound := s.call(e, env)
		if fd == nil {
			return nil
		}
		lit := firstLit(fd.Body, func(t ast.Expr) bool { return isCLIType(t, "Command") })
		if lit == nil {
			return nil
		}
		return s.commandLit(lit, bound)
	}
	lit, ok := e.(*ast.CompositeLit)
	if !ok || (lit.Type != nil && !isCLIType(lit.Type, "Command")) {
		return nil
	}
	return s.commandLit(lit, env)
}

func (s *cliSource) commandLit(lit *ast.CompositeLit, env map[string]ast.Expr) *cliCmd {
	c := &cliCmd{flags: map[string]bool{"help": true, "h": true}, line: s.fset.Position(lit.Pos()).String()}
	for _, kv := range lit.Elts {
		kv, ok := kv.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		switch keyName(kv) {
		case "Name":
			c.name, _ = s.str(kv.Value, env)
			c.names = append(c.names, c.name)
		case "Aliases":
			if al, ok := unparen(kv.Value).(*ast.CompositeLit); ok {
				for _, a := range al.Elts {
					if v, ok := s.str(a, env); ok {
						c.names = append(c.names, v)
					}
				}
			}
		case "Flags":
			s.addFlags(c.flags, kv.Value, env)
		case "Subcommands":
			c.subs = s.commandList(kv.Value, env)
		}
	}
	return c
}

func (s *cliSource) addFlags(flags map[string]bool, e ast.Expr, env map[string]ast.Expr) {
	cl, ok := unparen(e).(*ast.CompositeLit)
	if !ok {
		return
	}
	for _, el := range cl.Elts {
		s.addFlag(flags, el, env, 0)
	}
}

func (s *cliSource) addFlag(flags map[string]bool, e ast.Expr, env map[string]ast.Expr, depth int) {
	if depth > 4 {
		return
	}
	switch x := unparen(e).(type) {
	case *ast.Ident:
		if v, ok := s.vars[x.Name]; ok {
			s.addFlag(flags, v, env, depth+1)
		}
	case *ast.CallExpr:
		fd, bound := s.call(x, env)
		if fd != nil {
			if lit := firstLit(fd.Body, func(t ast.Expr) bool { return isCLIType(t, "Flag") }); lit != nil {
				s.addFlag(flags, lit, bound, depth+1)
			}
		}
	case *ast.CompositeLit:
		if !isCLIType(x.Type, "Flag") {
			return
		}
		isBool := x.Type.(*ast.SelectorExpr).Sel.Name == "BoolFlag"
		for _, kv := range x.Elts {
			kv, ok := kv.(*ast.KeyValueExpr)
			if !ok {
				continue
			}
			switch keyName(kv) {
			case "Name":
				if v, ok := s.str(kv.Value, env); ok {
					flags[v] = isBool
				}
			case "Aliases":
				if al, ok := unparen(kv.Value).(*ast.CompositeLit); ok {
					for _, a := range al.Elts {
						if v, ok := s.str(a, env); ok {
							flags[v] = isBool
						}
					}
				}
			}
		}
	}
}

// checkOverlayd checks an overlayd command line against the command tree:
// every subcommand exists, and every flag is defined on the command it
// reaches or on one above it.
func checkOverlayd(root *cliCmd, args []string) error {
	path := []*cliCmd{root}
	cur := root
	for i := 0; i < len(args); i++ {
		a := strings.Trim(args[i], "[]")
		if a == "" {
			continue
		}
		if a == "--" {
			return nil
		}
		if strings.HasPrefix(a, "-") {
			name, _, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
			isBool, found := false, false
			for j := len(path) - 1; j >= 0 && !found; j-- {
				isBool, found = path[j].flags[name]
			}
			if !found {
				return fmt.Errorf("overlayd %s has no flag --%s", cmdPath(path), name)
			}
			if !isBool && !hasVal {
				i++
			}
			continue
		}
		if len(cur.subs) == 0 {
			continue // an argument
		}
		next := cur.sub(a)
		if next == nil {
			var have []string
			for _, s := range cur.subs {
				have = append(have, s.name)
			}
			return fmt.Errorf("overlayd %s has no subcommand %q (has %s)", cmdPath(path), a, strings.Join(have, ", "))
		}
		cur = next
		path = append(path, cur)
	}
	return nil
}

func cmdPath(path []*cliCmd) string {
	var names []string
	for _, c := range path[1:] {
		names = append(names, c.name)
	}
	if len(names) == 0 {
		return "(top level)"
	}
	return strings.Join(names, " ")
}

var overlaydEnv = regexp.MustCompile(`\bOVERLAYD_[A-Z0-9_]*[A-Z0-9]\b`)

// goSources returns the text of every .go file of the repository, the
// separate bench module included.
func goSources(tb testing.TB, root string) string {
	tb.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			b.Write(data)
			b.WriteByte('\n')
		}
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	return b.String()
}

// TestBenchmarkDocCommands checks that every command docs/BENCHMARKS.md
// gives still names what exists: for `go test`, each package, the
// benchmarks its -bench pattern selects (at least one func Benchmark... in
// the package's _test.go files matches the pattern's top level) and the
// tests its -run pattern selects; for `overlayd ...` (or `go run
// ./cmd/overlayd ...`), each subcommand and flag, from cmd/overlayd's
// urfave/cli definitions; for `bash script.sh`, the script; and every
// OVERLAYD_* variable the page names must appear in some .go file.
func TestBenchmarkDocCommands(t *testing.T) {
	root, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(benchDoc)
	if err != nil {
		t.Fatal(err)
	}
	cli := loadCLI(t, filepath.Join(root, "cmd", "overlayd"))
	if cli.sub("testnet") == nil || cli.sub("testnet").sub("sim") == nil {
		t.Fatalf("cmd/overlayd: the command tree read from the source has no `testnet sim`; the reader of urfave/cli definitions needs mending")
	}

	var nGoTest, nBench, nOverlayd int
	dirs := map[int]string{} // working directory of each code block
	for _, c := range docCommands(string(md)) {
		dir := "."
		if c.block != 0 && dirs[c.block] != "" {
			dir = dirs[c.block]
		}
		segs, after := shellSegments(c.text, dir)
		if c.block != 0 {
			dirs[c.block] = after
		}
		for _, sc := range segs {
			seg := stripWrappers(sc.words)
			if len(seg) == 0 {
				continue
			}
			head := seg[0]
			switch {
			case head == "go" && len(seg) > 1 && seg[1] == "test":
				nGoTest++
				g := parseGoTest(seg[2:])
				if g.hasBench {
					nBench++
				}
				for _, err := range checkGoTest(root, sc.dir, seg[2:]) {
					t.Errorf("%v: %v", c, err)
				}
			case head == "go" && len(seg) > 2 && seg[1] == "run" && path.Clean(seg[2]) == "cmd/overlayd":
				nOverlayd++
				if err := checkOverlayd(cli, seg[3:]); err != nil {
					t.Errorf("%v: %v", c, err)
				}
			case path.Base(head) == "overlayd" && len(seg) > 1:
				nOverlayd++
				if err := checkOverlayd(cli, seg[1:]); err != nil {
					t.Errorf("%v: %v", c, err)
				}
			case head == "bash" && len(seg) > 1 && strings.HasSuffix(seg[1], ".sh"):
				if _, err := os.Stat(filepath.Join(root, sc.dir, seg[1])); err != nil {
					t.Errorf("%v: %v", c, err)
				}
			}
		}
	}
	t.Logf("%s: %d go test commands (%d with -bench), %d overlayd commands", benchDoc, nGoTest, nBench, nOverlayd)
	if nBench < 15 || nOverlayd < 5 {
		t.Errorf("%s: found only %d go test -bench and %d overlayd commands; the page or the command reader changed", benchDoc, nBench, nOverlayd)
	}

	src := goSources(t, root)
	seen := map[string]bool{}
	for _, v := range overlaydEnv.FindAllString(string(md), -1) {
		seen[v] = true
	}
	var vars []string
	for v := range seen {
		vars = append(vars, v)
	}
	sort.Strings(vars)
	for _, v := range vars {
		if !strings.Contains(src, `"`+v+`"`) {
			t.Errorf("%s names %s, which no .go file of the repository reads (no %q literal)", benchDoc, v, v)
		}
	}
}
