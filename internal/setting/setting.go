// Package setting is the error a package below the command line returns
// about one of its settings (bad input, mostly), said in its own terms: a
// setting is named as the Go field that holds it (launcher.Config's
// HangTimeout, rendezvous.StaticConfig's MasterPort), never as the flag
// that sets it, which the library does not know. A program that uses the
// library reads
//
//	HangTimeout: -1s, want 0 (off) or more
//
// and the command line (internal/cmdline), which knows which flag sets
// which setting, shows the same error with its flags (Message):
//
//	--hang-timeout: -1s, want 0 (off) or more
//
// Most are bad input; a few are a setting that cannot be used as it is
// (a master port another process holds, a log folder that cannot be
// made), which name it the same way. An Error decides no exit code: the
// command line does, as for any error.
package setting

import (
	"fmt"
	"strings"
)

// Name names a setting in the library's terms: the field of the
// configuration that holds it, with the path to it where it is nested
// ("Entrypoint.Module"). As an argument of Errorf it reads as its name,
// and Message can name it otherwise.
type Name string

// Error is an error about a setting (bad input, mostly; whether it is
// is the command line's to decide), in the library's words: an
// fmt.Errorf message whose Name arguments name the settings it is
// about. It unwraps to what the message wraps (%w): a cause, a sentinel
// such as rendezvous.ErrInvalidRunID.
type Error struct {
	// Setting is the setting the input is about: the first one the
	// message names.
	Setting Name
	format  string
	args    []any
	err     error // fmt.Errorf(format, args...): the message, and what it wraps
}

// Errorf is fmt.Errorf(format, a...) as an *Error: the settings it names
// are arguments of type Name (formatted with %s or %v), the first of
// them the one the input is about, and %w wraps as in fmt.Errorf.
//
//	setting.Errorf("%s=%q: no part of it exists", setting.Name("LogDir"), dir)
func Errorf(format string, a ...any) error {
	e := &Error{format: format, args: a, err: fmt.Errorf(format, a...)}
	for _, v := range a {
		if s, ok := v.(Name); ok {
			e.Setting = s
			break
		}
	}
	return e
}

// Error is the message with the settings' own names.
func (e *Error) Error() string { return e.err.Error() }

// Unwrap is what the message wraps with %w, if anything.
func (e *Error) Unwrap() []error {
	switch u := e.err.(type) {
	case interface{ Unwrap() error }:
		return []error{u.Unwrap()}
	case interface{ Unwrap() []error }:
		return u.Unwrap()
	}
	return nil
}

// Settings are the settings the message names, in its order.
func (e *Error) Settings() []Name {
	var out []Name
	for _, v := range e.args {
		if s, ok := v.(Name); ok {
			out = append(out, s)
		}
	}
	return out
}

// Text is the message with each setting s named name(s) instead (a
// setting for which name returns "" keeps its own name). What the message
// wraps reads as its own Error.
func (e *Error) Text(name func(Name) string) string {
	args := make([]any, len(e.args))
	for i, v := range e.args {
		if s, ok := v.(Name); ok {
			if n := name(s); n != "" {
				v = n
			}
		}
		args[i] = v
	}
	return fmt.Errorf(e.format, args...).Error()
}

// Message is err's text with the settings that each *Error in its tree
// (err, and what it wraps, as errors.As walks it) names named by name,
// as Text does: the context that wraps them is kept as it is.
func Message(err error, name func(Name) string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	walk(err, func(e *Error) {
		// An Error's own text is in what wraps it, verbatim (%w and %v
		// both print it); an outer Error's Text still holds the inner
		// one's own text, replaced when the walk reaches it.
		msg = strings.ReplaceAll(msg, e.Error(), e.Text(name))
	})
	return msg
}

// walk calls f on each *Error in err's tree, an Error before what it
// wraps.
func walk(err error, f func(*Error)) {
	if err == nil {
		return
	}
	if e, ok := err.(*Error); ok {
		f(e)
	}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		walk(u.Unwrap(), f)
	case interface{ Unwrap() []error }:
		for _, c := range u.Unwrap() {
			walk(c, f)
		}
	}
}
