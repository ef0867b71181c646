package cmdline

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/rendezvous"
)

// UsageError is bad input: a flag, a setting, an environment value, a
// file the user named. gorun prints it and exits 2, as torchrun's
// argparse does. It is a cli.ExitCoder, so an action returns it as it
// is, and Main finds it through any wrapping (a rendezvous's error
// returned by the agent). Its text names flags where the library's error
// names settings (message).
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return message(e.Err) }

// Unwrap is the input error.
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode is 2, torchrun's for bad input.
func (e *UsageError) ExitCode() int { return 2 }

// Usage marks err as bad input; nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// Usagef is bad input described by format and a.
func Usagef(format string, a ...any) error {
	return &UsageError{Err: fmt.Errorf(format, a...)}
}

// isUsage says whether err is, or wraps, bad input: a UsageError, or a
// rendezvous's verdict on this node's settings (rendezvous.ErrInvalidConfig,
// ErrShapeMismatch, ErrInvalidNode).
func isUsage(err error) bool {
	var u *UsageError
	return errors.As(err, &u) || errors.Is(err, rendezvous.ErrInvalidConfig) ||
		errors.Is(err, rendezvous.ErrShapeMismatch) || errors.Is(err, rendezvous.ErrInvalidNode)
}

// message is err's text as the command line shows it: where an error of
// the library packages names a setting (a setting.Error, however deep
// it is wrapped), the flag that sets it (settingFlags), the context
// around it kept as it is.
func message(err error) string { return setting.Message(err, flagOf) }

// shownError is err as the command line shows it (message); it unwraps
// to err, so that errors.Is and As still see what err wraps.
type shownError struct{ err error }

func (e shownError) Error() string { return message(e.err) }
func (e shownError) Unwrap() error { return e.err }

// ExitError is the command's exit for err: 2 for bad input (isUsage),
// the code err already carries when it is a cli.ExitCoder itself, code
// otherwise; err's text (message) is printed either way.
func ExitError(err error, code int) error {
	var u *UsageError
	var ec cli.ExitCoder
	switch {
	case errors.As(err, &u) && u == err:
		return err
	case isUsage(err):
		return Usage(err)
	case errors.As(err, &ec) && ec == err:
		return err
	}
	return cli.Exit(shownError{err}, code)
}
