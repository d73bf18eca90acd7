package protocol

import (
	"fmt"
	"unicode"
	"unicode/utf8"
)

// CheckGroupName checks a group name as every receiver does before acting
// on it: 1 to MaxGroupName bytes of valid UTF-8, printable (letters, marks,
// numbers, punctuation, symbols and the ASCII space; no control, format or
// other invisible characters, no other spaces), with no space at either
// end. Names are compared byte for byte: no normalisation.
func CheckGroupName(name string) error {
	switch {
	case name == "" || len(name) > MaxGroupName:
		return fmt.Errorf("%w: must be 1 to %d bytes, not %d", ErrGroupName, MaxGroupName, len(name))
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: not valid UTF-8", ErrGroupName)
	case name[0] == ' ' || name[len(name)-1] == ' ':
		return fmt.Errorf("%w: %q starts or ends with a space", ErrGroupName, name)
	}
	for i, r := range name {
		if r != ' ' && !unicode.IsPrint(r) {
			return fmt.Errorf("%w: %q has the unprintable character %U at byte %d", ErrGroupName, name, r, i)
		}
	}
	return nil
}
