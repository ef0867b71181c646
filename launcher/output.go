package launcher

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
)

// maxLine is the longest line kept whole on the console; a longer run of
// text without a newline is printed in pieces of this size, each on its
// own prefixed line, so one worker cannot hold the console.
const maxLine = 64 << 10

// Console writes whole lines from many workers to one stream, so that no
// line ever holds text of two workers. It is safe for concurrent use.
type Console struct {
	mu sync.Mutex
	w  io.Writer
}

// NewConsole returns a Console writing to w.
func NewConsole(w io.Writer) *Console { return &Console{w: w} }

// writeLine writes line, which ends in a newline, with one Write call.
func (c *Console) writeLine(line []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, _ = c.w.Write(line) // a console that fails cannot be told about it
}

// ExpandPrefix fills torchrun's placeholders ${role_name}, ${local_rank},
// ${rank} and (torchrun 2.x) ${hostname} in a --log-line-prefix-template.
func ExpandPrefix(template, role string, localRank, rank int, hostname string) string {
	return strings.NewReplacer(
		"${role_name}", role,
		"${local_rank}", strconv.Itoa(localRank),
		"${rank}", strconv.Itoa(rank),
		"${hostname}", hostname,
	).Replace(template)
}

// filteredLines passes on, prefixed, the lines of one worker stream that
// hold any of its filters, to a file that the attempt's workers share
// (torchrun 2.x's --duplicate-stdout-filters). It is a pump's second
// sink beside the stream's log file, so it sees the stream's bytes
// whatever their chunks; a line is whole once its newline came (or
// maxLine bytes without one).
type filteredLines struct {
	out     *Console
	filters []string
	prefix  string
	line    []byte
}

// Write implements io.Writer; it never fails (a line the file cannot
// take is lost to it, as to the console).
func (f *filteredLines) Write(p []byte) (int, error) {
	for _, b := range p {
		f.line = append(f.line, b)
		if b == '\n' || len(f.line) >= maxLine {
			f.emit()
		}
	}
	return len(p), nil
}

// flush passes on the last line of a stream that ended without a newline.
func (f *filteredLines) flush() {
	if len(f.line) > 0 {
		f.emit()
	}
}

func (f *filteredLines) emit() {
	line := f.line
	f.line = f.line[:0]
	for _, needle := range f.filters {
		if bytes.Contains(line, []byte(needle)) {
			out := append([]byte(f.prefix), line...)
			if out[len(out)-1] != '\n' {
				out = append(out, '\n')
			}
			f.out.writeLine(out)
			return
		}
	}
}

// ParseFilters splits a --duplicate-stdout-filters value as torchrun 2.x
// does: at commas, a double comma standing for a comma in a filter. An
// empty value is one empty filter, which every line holds.
func ParseFilters(v string) []string {
	const placeholder = "\x00"
	parts := strings.Split(strings.ReplaceAll(v, ",,", placeholder), ",")
	for i, p := range parts {
		parts[i] = strings.ReplaceAll(p, placeholder, ",")
	}
	return parts
}

// pump copies one worker stream, line by line, to a file (raw) and to a
// console (prefixed); either may be nil. It returns at EOF or when r is
// closed. If the file cannot be written (a full disk), the console still
// gets every line and the file's error is returned at the end.
func pump(r io.Reader, file io.Writer, console *Console, prefix string) error {
	br := bufio.NewReaderSize(r, maxLine)
	buf := make([]byte, 0, len(prefix)+maxLine+1)
	var fileErr error
	for {
		line, err := br.ReadSlice('\n')
		if len(line) > 0 {
			if file != nil {
				if _, werr := file.Write(line); werr != nil {
					fileErr = fmt.Errorf("log file: %w; later lines reach only the console", werr)
					file = nil
				}
			}
			if console != nil {
				buf = append(append(buf[:0], prefix...), line...)
				if buf[len(buf)-1] != '\n' {
					buf = append(buf, '\n')
				}
				console.writeLine(buf)
			}
		}
		switch {
		case err == nil, errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF), errors.Is(err, os.ErrClosed):
			return fileErr
		default:
			return errors.Join(err, fileErr)
		}
	}
}
