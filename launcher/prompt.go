package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"
)

// promptIdle is how long the worker that holds the terminal may leave a
// line unfinished before gorun shows it: a prompt ("(Pdb) ", input()'s)
// waits for the user without a newline.
const promptIdle = 50 * time.Millisecond

// writeRaw writes b as it is, with one Write call: part of a line, for
// the worker that holds the terminal.
func (c *Console) writeRaw(b []byte) { c.writeLine(b) }

// pumpPrompting is pump for the worker that holds gorun's terminal: a
// line left unfinished for promptIdle (a prompt) is shown as it is, with
// its prefix, and what follows on that line is shown after it without a
// second prefix. f is the pipe src reads (for its read deadline).
func pumpPrompting(src io.Reader, f *os.File, file io.Writer, console *Console, prefix string) error {
	chunk := make([]byte, 32<<10)
	var pending, out []byte // the line so far; what goes to the console
	midLine := false        // the console shows part of this line already
	var fileErr error
	show := func(b []byte, end bool) {
		if console == nil {
			return
		}
		out = out[:0]
		if !midLine {
			out = append(out, prefix...)
		}
		out = append(out, b...)
		if end && (len(b) == 0 || b[len(b)-1] != '\n') {
			out = append(out, '\n')
		}
		console.writeRaw(out)
		midLine = !end
	}
	for {
		deadline := time.Time{}
		if len(pending) > 0 {
			deadline = time.Now().Add(promptIdle)
		}
		_ = f.SetReadDeadline(deadline)
		n, err := src.Read(chunk)
		if n > 0 {
			data := chunk[:n]
			if file != nil {
				if _, werr := file.Write(data); werr != nil {
					fileErr = fmt.Errorf("log file: %w; later lines reach only the console", werr)
					file = nil
				}
			}
			for {
				i := bytes.IndexByte(data, '\n')
				if i < 0 {
					break
				}
				show(append(pending, data[:i+1]...), true)
				pending, data = pending[:0], data[i+1:]
			}
			pending = append(pending, data...)
			if len(pending) >= maxLine {
				show(pending, true)
				pending = pending[:0]
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, os.ErrDeadlineExceeded):
			if len(pending) > 0 {
				show(pending, false) // a prompt: shown, the line stays open
				pending = pending[:0]
			}
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			if len(pending) > 0 || midLine {
				show(pending, true)
			}
			return fileErr
		default:
			return errors.Join(err, fileErr)
		}
	}
}
