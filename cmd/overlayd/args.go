package main

import (
	"strings"

	"github.com/urfave/cli/v2"
)

// completionFlag is the flag urfave/cli's shell completion appends last.
const completionFlag = "--generate-bash-completion"

// reorderArgs lets flags come before or after positional arguments on every
// command, as in `overlayd send <peer> <text> --json`: urfave/cli v2 stops
// parsing flags at the first positional argument, so the command's own
// arguments are rearranged to its flags (with their values) first, then
// "--" and the positional arguments. Which flags take a value is read from
// the command's flag definitions; a bool flag takes none unless written
// --flag=value. A "--" the user wrote still ends the flags: everything
// after it stays positional. A lone "-" (stdin) is positional.
func reorderArgs(app *cli.App, args []string) []string {
	if len(args) < 2 {
		return args
	}
	rest := args[1:]
	var tail []string
	if rest[len(rest)-1] == completionFlag {
		rest, tail = rest[:len(rest)-1], []string{completionFlag}
	}
	out := []string{args[0]}
	// The app's own flags (--help, --version) take no value.
	for len(rest) > 0 && isFlag(rest[0]) {
		out, rest = append(out, rest[0]), rest[1:]
	}
	cmds := app.Commands
	for len(rest) > 0 {
		c := findCommand(cmds, rest[0])
		if c == nil {
			break
		}
		out, rest = append(out, rest[0]), rest[1:]
		if len(rest) > 0 && len(c.Subcommands) > 0 && findCommand(c.Subcommands, rest[0]) != nil {
			cmds = c.Subcommands
			continue
		}
		out = append(out, flagsFirst(c.Flags, rest)...)
		rest = nil
	}
	return append(append(out, rest...), tail...)
}

// flagsFirst moves flags and their values before the positional arguments,
// which follow a "--".
func flagsFirst(flags []cli.Flag, args []string) []string {
	takesValue := map[string]bool{}
	for _, f := range flags {
		tv := false
		if d, ok := f.(cli.DocGenerationFlag); ok {
			tv = d.TakesValue()
		}
		for _, n := range f.Names() {
			takesValue[n] = tv
		}
	}
	var fl, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if !isFlag(a) {
			pos = append(pos, a)
			continue
		}
		fl = append(fl, a)
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if takesValue[name] && i+1 < len(args) {
			fl = append(fl, args[i+1])
			i++
		}
	}
	if len(pos) == 0 {
		return fl
	}
	return append(append(fl, "--"), pos...)
}

func isFlag(a string) bool { return len(a) > 1 && a[0] == '-' && a != "--" }

func findCommand(cmds []*cli.Command, name string) *cli.Command {
	for _, c := range cmds {
		if c.HasName(name) {
			return c
		}
	}
	return nil
}
