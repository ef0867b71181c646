package comm

import (
	"bufio"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/gorun-dev/gorun/internal/sys/ctxtime"
)

// StoreClient talks to a StoreServer. It is safe for concurrent use (one
// request at a time).
type StoreClient struct {
	mu  sync.Mutex
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

// ErrStoreAuth is a store that refused this client's proof of the job's
// secret, or that could not prove its own.
var ErrStoreAuth = errors.New("store: authentication failed")

// DialStore connects to the store at addr and authenticates with secret,
// retrying until ctx ends while nothing listens there (rank 0 may start
// after the others); a store that refuses the secret, or cannot prove
// it knows it, is an error at once (ErrStoreAuth).
func DialStore(ctx context.Context, addr string, secret Secret) (*StoreClient, error) {
	var d net.Dialer
	delay := 10 * time.Millisecond
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			sc := &StoreClient{c: c, r: bufio.NewReader(c)}
			if err = sc.handshake(ctx, secret); err == nil {
				return sc, nil
			}
			c.Close()
			if errors.Is(err, ErrStoreAuth) || ctx.Err() != nil {
				return nil, fmt.Errorf("store at %s (rank 0, MASTER_ADDR:MASTER_PORT): %w", addr, err)
			}
		}
		if cerr := ctxtime.Sleep(ctx, delay); cerr != nil {
			return nil, fmt.Errorf("store at %s (rank 0, MASTER_ADDR:MASTER_PORT): %w (last: %v)", addr, cerr, err)
		}
		delay = min(2*delay, 500*time.Millisecond)
	}
}

// handshake answers the server's challenge and checks its proof.
func (c *StoreClient) handshake(ctx context.Context, secret Secret) error {
	stop := c.deadline(ctx, time.Now().Add(DefaultHandshakeTimeout))
	defer stop()
	line, err := readLine(c.r, maxHandshakeLine, nil)
	if err != nil {
		return fmt.Errorf("no greeting: %w", err)
	}
	hexNonce, ok := strings.CutPrefix(strings.TrimSuffix(string(line), "\n"), storeGreeting)
	nonce, ok2 := parseHex(hexNonce, nonceLen)
	if !ok || !ok2 {
		return fmt.Errorf("%w: it does not speak gorun's store protocol (greeting %.60q)", ErrStoreAuth, line)
	}
	mine, err := newNonce()
	if err != nil {
		return err
	}
	answer := "AUTH " + hex.EncodeToString(mine) + " " + hex.EncodeToString(secretMAC(secret, labelStoreClient, nonce, mine)) + "\n"
	if _, err := c.c.Write([]byte(answer)); err != nil {
		return err
	}
	if line, err = readLine(c.r, maxHandshakeLine, nil); err != nil {
		return fmt.Errorf("no answer to the proof: %w", err)
	}
	reply := strings.TrimSuffix(string(line), "\n")
	if msg, ok := strings.CutPrefix(reply, "ERR "); ok {
		return fmt.Errorf("%w: the store said %.200q (does every rank have the same %s?)", ErrStoreAuth, msg, JobSecretEnv)
	}
	proof, ok := strings.CutPrefix(reply, "OK ")
	mac, ok2 := parseHex(proof, 32)
	if !ok || !ok2 || !verifyMAC(secret, mac, labelStoreServer, nonce, mine) {
		return fmt.Errorf("%w: the store did not prove it knows %s (a store of another job, or a stranger)", ErrStoreAuth, JobSecretEnv)
	}
	return nil
}

// deadline bounds the connection's I/O by ctx and by dl; the returned
// function undoes it.
func (c *StoreClient) deadline(ctx context.Context, dl time.Time) func() {
	if d, ok := ctx.Deadline(); ok && (dl.IsZero() || d.Before(dl)) {
		dl = d
	}
	_ = c.c.SetDeadline(dl)
	stop := context.AfterFunc(ctx, func() { _ = c.c.SetDeadline(time.Now()) })
	return func() {
		stop()
		_ = c.c.SetDeadline(time.Time{})
	}
}

// LocalAddr is this end's address: one the other ranks can reach.
func (c *StoreClient) LocalAddr() net.Addr { return c.c.LocalAddr() }

func (c *StoreClient) roundTrip(ctx context.Context, req string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	stop := c.deadline(ctx, time.Time{})
	defer stop()
	if _, err := c.c.Write([]byte(req)); err != nil {
		return "", err
	}
	line, err := readLine(c.r, MaxValueLen+len("VAL \n"), c.buf)
	if err != nil {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		if errors.Is(err, errTooLong) {
			return "", fmt.Errorf("an answer of more than %d bytes: the limit is 64 MiB (MaxValueLen)", MaxValueLen)
		}
		return "", err
	}
	c.buf = line
	return strings.TrimSuffix(string(line), "\n"), nil
}

// Set implements Store.
func (c *StoreClient) Set(ctx context.Context, key, value string) error {
	return c.acknowledged(ctx, "SET", "set", key, value)
}

// acknowledged sends "VERB key value" and expects "OK"; what names the
// request in errors.
func (c *StoreClient) acknowledged(ctx context.Context, verb, what, key, value string) error {
	if err := checkRequest(key, value); err != nil {
		return err
	}
	reply, err := c.roundTrip(ctx, verb+" "+key+" "+value+"\n")
	if err != nil {
		return fmt.Errorf("store: %s %s: %w", what, key, err)
	}
	if reply != "OK" {
		return refusal(reply)
	}
	return nil
}

// Create sets key to value unless it is set, and returns the value the
// key then has: value if this call set it, else the first one.
func (c *StoreClient) Create(ctx context.Context, key, value string) (string, error) {
	if err := checkRequest(key, value); err != nil {
		return "", err
	}
	reply, err := c.roundTrip(ctx, "ADD "+key+" "+value+"\n")
	if err != nil {
		return "", fmt.Errorf("store: create %s: %w", key, err)
	}
	return valueOf(reply)
}

// CreateOnClose asks the store to Create key with value when this
// connection ends: when the process closes it, exits or is killed (the
// kernel closes its sockets), so that the others learn it is gone
// without waiting for a timeout. A connection that waits for a Get when
// its process dies is seen to end only once that key is set: use one
// that is idle.
func (c *StoreClient) CreateOnClose(ctx context.Context, key, value string) error {
	return c.acknowledged(ctx, "ONCLOSE", "on close, create", key, value)
}

// Get implements Store.
func (c *StoreClient) Get(ctx context.Context, key string) (string, error) {
	if err := checkRequest(key, ""); err != nil {
		return "", err
	}
	reply, err := c.roundTrip(ctx, "GET "+key+"\n")
	if err != nil {
		return "", fmt.Errorf("store: get %s: %w", key, err)
	}
	return valueOf(reply)
}

func valueOf(reply string) (string, error) {
	v, ok := strings.CutPrefix(reply, "VAL ")
	if !ok {
		return "", refusal(reply)
	}
	return v, nil
}

// refusal is the error of an answer that is not the one expected.
func refusal(reply string) error {
	if msg, ok := strings.CutPrefix(reply, "ERR "); ok {
		return errors.New(msg)
	}
	return fmt.Errorf("store: unexpected answer %.100q", reply)
}

// Close ends the connection.
func (c *StoreClient) Close() error { return c.c.Close() }
