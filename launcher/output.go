package launcher

import (
	"bufio"
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

// ExpandPrefix fills torchrun's placeholders ${role_name}, ${local_rank}
// and ${rank} in a --log-line-prefix-template.
func ExpandPrefix(template, role string, localRank, rank int) string {
	return strings.NewReplacer(
		"${role_name}", role,
		"${local_rank}", strconv.Itoa(localRank),
		"${rank}", strconv.Itoa(rank),
	).Replace(template)
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
