package comm

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits of the worker store, enforced while a request is read: no
// request makes the server buffer more than MaxKeyLen plus MaxValueLen
// (and a few bytes), whoever sends it.
const (
	// MaxKeyLen bounds a key (4 KiB).
	MaxKeyLen = 4 << 10
	// MaxValueLen bounds a value (64 MiB).
	MaxValueLen = 64 << 20
	// maxHandshakeLine bounds a line of the store's handshake.
	maxHandshakeLine = 256
	// maxVerbLen bounds a request's verb (SET, ADD, GET, ONCLOSE).
	maxVerbLen = 8
	// maxOnClose bounds the ONCLOSE requests a connection may leave.
	maxOnClose = 16
)

// storeGreeting starts the server's first line: the protocol's name and
// version, then the server's nonce in hex.
const storeGreeting = "GORUN-STORE 1 "

// errTooLong is a line longer than its limit.
var errTooLong = errors.New("too long")

// readLine reads one line, its newline included, of at most max bytes
// into buf[:0]. A longer line is errTooLong once max bytes are read:
// never more is buffered, and buf never grows past max (ReadString would
// grow without bound).
func readLine(r *bufio.Reader, max int, buf []byte) ([]byte, error) {
	buf = buf[:0]
	for {
		chunk, err := r.ReadSlice('\n')
		if len(buf)+len(chunk) > max {
			return nil, errTooLong
		}
		if cap(buf)-len(buf) < len(chunk) { // grow, never past max
			nb := make([]byte, len(buf), min(max, 2*cap(buf)+len(chunk)))
			copy(nb, buf)
			buf = nb
		}
		buf = append(buf, chunk...)
		if err == nil {
			return buf, nil
		}
		if err != bufio.ErrBufferFull {
			if err == io.EOF && len(buf) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// readToken reads bytes up to a space or a newline, at most max of them,
// and returns them and the byte that ended them.
func readToken(r *bufio.Reader, max int) (string, byte, error) {
	var b strings.Builder
	for {
		c, err := r.ReadByte()
		if err != nil {
			if err == io.EOF && b.Len() > 0 {
				err = io.ErrUnexpectedEOF
			}
			return "", 0, err
		}
		if c == ' ' || c == '\n' {
			return b.String(), c, nil
		}
		if b.Len() == max {
			return "", 0, errTooLong
		}
		b.WriteByte(c)
	}
}

// request is one store request.
type request struct {
	verb, key string
	value     []byte // SET, ADD and ONCLOSE
}

// requestError is a request the server refuses: it answers with the
// message and closes the connection.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func refuse(format string, a ...any) error { return &requestError{msg: fmt.Sprintf(format, a...)} }

// readRequest reads "GET key\n", "SET key value\n", "ADD key value\n" or
// "ONCLOSE key value\n" with the limits above; buf is the connection's value buffer, returned
// grown.
func readRequest(r *bufio.Reader, buf []byte) (request, []byte, error) {
	verb, end, err := readToken(r, maxVerbLen)
	if errors.Is(err, errTooLong) {
		return request{}, buf, refuse("store: malformed request: want SET, ADD, GET or ONCLOSE")
	}
	if err != nil {
		return request{}, buf, err
	}
	switch verb {
	case "SET", "ADD", "GET", "ONCLOSE":
	default:
		return request{}, buf, refuse("store: unknown request %q: want SET, ADD, GET or ONCLOSE", verb)
	}
	if end != ' ' {
		return request{}, buf, refuse("store: %s without a key", verb)
	}
	key, end, err := readToken(r, MaxKeyLen)
	if errors.Is(err, errTooLong) {
		return request{}, buf, refuse("store: %s: a key of more than %d bytes: the limit is %d (MaxKeyLen)", verb, MaxKeyLen, MaxKeyLen)
	}
	if err != nil {
		return request{}, buf, err
	}
	req := request{verb: verb, key: key}
	if verb == "GET" {
		if end != '\n' {
			return request{}, buf, refuse("store: GET: a key with a space: want GET key")
		}
		return req, buf, nil
	}
	if end != ' ' {
		return request{}, buf, refuse("store: %s %s without a value: want %s key value", verb, key, verb)
	}
	line, err := readLine(r, MaxValueLen+1, buf)
	if errors.Is(err, errTooLong) {
		return request{}, buf, refuse("store: %s: a value of more than %d bytes: the limit is 64 MiB (MaxValueLen)", verb, MaxValueLen)
	}
	if err != nil {
		return request{}, buf, err
	}
	req.value = line[:len(line)-1]
	return req, line, nil
}

// checkRequest refuses, on the client's side, what the server would.
func checkRequest(key, value string) error {
	switch {
	case key == "" || strings.ContainsAny(key, " \n"):
		return fmt.Errorf("store: key %.100q: want a non-empty key without spaces or newlines", key)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("store: a key of %d bytes: the limit is %d (MaxKeyLen)", len(key), MaxKeyLen)
	case len(value) > MaxValueLen:
		return fmt.Errorf("store: %s: a value of %d bytes: the limit is 64 MiB (MaxValueLen)", key, len(value))
	case strings.Contains(value, "\n"):
		return fmt.Errorf("store: %s: a value with a newline: values are one line", key)
	}
	return nil
}

// parseHex decodes a field of n bytes written in hex.
func parseHex(field string, n int) ([]byte, bool) {
	b, err := hex.DecodeString(field)
	return b, err == nil && len(b) == n
}

// parseAuth reads the client's answer "AUTH <nonce> <mac>\n".
func parseAuth(line []byte) (nonce, mac []byte, ok bool) {
	rest, ok := bytes.CutPrefix(bytes.TrimSuffix(line, []byte("\n")), []byte("AUTH "))
	if !ok {
		return nil, nil, false
	}
	n, m, ok := strings.Cut(string(rest), " ")
	if !ok {
		return nil, nil, false
	}
	nonce, ok1 := parseHex(n, nonceLen)
	mac, ok2 := parseHex(m, 32)
	return nonce, mac, ok1 && ok2
}
