package elastic

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"
)

// probeTimeout bounds each step of diagnose.
const probeTimeout = 2 * time.Second

// diagnosis is what diagnose found at the endpoints: a line for the user
// and whether retrying cannot help (a TLS mismatch: only new settings
// can fix it).
type diagnosis struct {
	text      string
	permanent bool
}

// diagnose says, for each endpoint, why etcd may be unreachable: a host
// that does not resolve, a port that refuses, no answer at all, a TLS
// mismatch (the port speaks TLS and the client does not, or the other way
// round, or the certificates do not match), or a port that accepts but
// where etcd does not answer. tlsCfg is the client's TLS, nil for none.
func diagnose(ctx context.Context, endpoints []string, tlsCfg *tls.Config) diagnosis {
	var out []string
	d := diagnosis{permanent: len(endpoints) > 0}
	for _, ep := range endpoints {
		text, permanent := probe(ctx, ep, tlsCfg)
		out = append(out, ep+": "+text)
		d.permanent = d.permanent && permanent
	}
	d.text = strings.Join(out, "; ")
	return d
}

// probe diagnoses one endpoint.
func probe(ctx context.Context, endpoint string, tlsCfg *tls.Config) (text string, permanent bool) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return err.Error(), true
	}
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if net.ParseIP(host) == nil {
		if _, err := net.DefaultResolver.LookupHost(rctx, host); err != nil {
			return fmt.Sprintf("host %q does not resolve (%v)", host, err), false
		}
	}
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(rctx, "tcp", endpoint)
	switch {
	case err == nil:
		defer c.Close()
		return probeTLS(c, host, tlsCfg)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused (nothing listens on that port)", false
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "no route to the host (" + err.Error() + ")", false
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Sprintf("no answer within %v (host down, or a firewall drops the packets)", probeTimeout), false
		}
		return err.Error(), false
	}
}

// tlsProbeTimeout bounds the TLS handshake of a probe.
const tlsProbeTimeout = time.Second

// notEtcd is probe's answer for a port that accepts connections where
// etcd does not answer and no TLS mismatch was found.
const notEtcd = "the port accepts connections, but etcd does not answer there (is it etcd? credentials?)"

// probeTLS tells, on an open connection, whether the port's TLS and the
// client's agree. Without client TLS, a port that completes a TLS
// handshake speaks TLS. With client TLS, a failed handshake (or an alert
// the server sends after it, as a refused client certificate is under
// TLS 1.3) is the reason.
func probeTLS(c net.Conn, host string, tlsCfg *tls.Config) (string, bool) {
	c.SetDeadline(time.Now().Add(tlsProbeTimeout))
	if tlsCfg == nil {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: host}) //nolint:gosec // only asks whether the port speaks TLS
		if err := tc.Handshake(); err == nil {
			return "the port speaks TLS, but no TLS settings were given (--rdzv-conf cacert=, and cert=,key= when it asks for client certificates)", true
		}
		return notEtcd, false
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	err := tc.Handshake()
	if err == nil {
		// A refused client certificate arrives as an alert after the
		// client's side of a TLS 1.3 handshake is done.
		_, err = tc.Read(make([]byte, 1))
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return notEtcd, false
		}
	}
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &record):
		return "the port does not speak TLS, but --rdzv-conf gives TLS files (" + err.Error() + ")", true
	case errors.As(err, &verify):
		return "TLS: the server's certificate is not trusted: " + verify.Err.Error() + " (check --rdzv-conf cacert=)", true
	case errors.As(err, &op) && op.Op == "remote error":
		// The server sent an alert: it refused this client's certificate
		// or has none, or the versions and ciphers do not meet.
		return "TLS: the server refused the connection: " + op.Err.Error() + " (check --rdzv-conf cert=, key=)", true
	}
	return notEtcd, false
}
