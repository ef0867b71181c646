package jobauth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/gorun-dev/gorun/internal/setting"
	"github.com/gorun-dev/gorun/internal/sys/proc"
)

// probeTimeout bounds each step of Diagnose.
const probeTimeout = 2 * time.Second

// Diagnosis is what Diagnose found at the endpoints: what each said, for
// the user (Why, an error to wrap: it names the settings that could fix
// it; Text, its line), and whether retrying cannot help (Permanent: a
// TLS mismatch, which only new settings can fix); Cause, when set, is
// ErrNotJobStore or ErrTokenRefused, for callers that may fetch a newer
// token.
type Diagnosis struct {
	Why       error
	Text      string
	Permanent bool
	Cause     error
}

// ErrTokenRefused: a job's store refused this node's certificate: the
// node holds another token than the store's (Diagnosis.Cause).
var ErrTokenRefused = errors.New("the store refuses this node's token")

// Diagnose says, for each endpoint, why etcd may be unreachable: a host
// that does not resolve, a port that refuses, no answer at all, a TLS
// mismatch (the port speaks TLS and the client does not, or the other way
// round, or the certificates do not match), or a port that accepts but
// where etcd does not answer. tlsCfg is the client's TLS, nil for none.
// jobStore says tlsCfg is the job's TLS (ClientTLS): a failed
// handshake then says the server is not the job's store, or does not
// take this node's token.
func Diagnose(ctx context.Context, endpoints []string, tlsCfg *tls.Config, jobStore bool) Diagnosis {
	var format []string
	var whys []any
	d := Diagnosis{Permanent: len(endpoints) > 0}
	for _, ep := range endpoints {
		why, permanent, cause := probe(ctx, ep, tlsCfg, jobStore)
		format = append(format, "%s: %w")
		whys = append(whys, ep, why)
		d.Permanent = d.Permanent && permanent
		if cause != nil {
			d.Cause = cause
		}
	}
	d.Why = fmt.Errorf(strings.Join(format, "; "), whys...)
	d.Text = d.Why.Error()
	return d
}

// probe diagnoses one endpoint.
func probe(ctx context.Context, endpoint string, tlsCfg *tls.Config, jobStore bool) (why error, permanent bool, cause error) {
	host, _, err := net.SplitHostPort(endpoint)
	if err != nil {
		return err, true, nil
	}
	rctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if net.ParseIP(host) == nil {
		if _, err := net.DefaultResolver.LookupHost(rctx, host); err != nil {
			return fmt.Errorf("host %q does not resolve (%v)", host, err), false, nil
		}
	}
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.DialContext(rctx, "tcp", endpoint)
	switch {
	case err == nil && jobStore:
		defer c.Close()
		return probeJobTLS(c, endpoint, tlsCfg)
	case err == nil:
		defer c.Close()
		text, permanent := probeTLS(c, host, tlsCfg)
		return text, permanent, nil
	case errors.Is(err, syscall.ECONNREFUSED):
		return errors.New("connection refused (nothing listens on that port)"), false, nil
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return fmt.Errorf("no route to the host (%v)", err), false, nil
	default:
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return fmt.Errorf("no answer within %v (host down, or a firewall drops the packets)", probeTimeout), false, nil
		}
		return err, false, nil
	}
}

// probeJobTLS tells, on an open connection to what should be the job's
// store, whether it is: the job's TLS handshake proves the server holds
// the token (nothing secret is sent to one that does not), and a refused
// certificate says this node's token is not the store's.
func probeJobTLS(c net.Conn, endpoint string, tlsCfg *tls.Config) (error, bool, error) {
	c.SetDeadline(time.Now().Add(tlsProbeTimeout))
	tc := tls.Client(c, tlsCfg)
	err := tc.Handshake()
	var ne net.Error
	if err != nil && errors.As(err, &ne) && ne.Timeout() {
		return errors.New("the port accepts connections but completes no TLS handshake: a store too busy to answer, or a process squatting the port that stays silent (nothing secret was sent to it)"), false, nil
	}
	if err == nil {
		// A refused client certificate arrives as an alert after the
		// client's side of a TLS 1.3 handshake is done.
		_, err = tc.Read(make([]byte, 1))
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			return errors.New(notEtcd), false, nil
		}
	}
	var record tls.RecordHeaderError
	var op *net.OpError
	var foreign *ForeignCertError
	switch {
	case errors.As(err, &foreign):
		return setting.Errorf("the port speaks TLS, with a certificate not of this job%s: if the job's store uses TLS files of yours (%s), give this node the same TLS settings (%s, and %s); otherwise the process on the port cannot prove it holds the job's token. Nothing secret was sent to it", proc.PortHolderNote(endpoint), setting.Name("Conf.cert"), setting.Name("Conf.cacert"), setting.Name("Conf.key")), true, ErrNotJobStore
	case errors.Is(err, ErrNotJobStore), errors.As(err, &record):
		return setting.Errorf("the process on the port cannot prove it holds the job's token%s; nothing secret was sent to it (another user's or another job's process, or the store of an earlier job with the same run id and endpoint; an external etcd wants %s=etcd)", proc.PortHolderNote(endpoint), setting.Name("Backend")), true, ErrNotJobStore
	case errors.As(err, &op) && op.Op == "remote error":
		return fmt.Errorf("%w (%v): every node of the job needs the same token", ErrTokenRefused, op.Err), true, ErrTokenRefused
	}
	return errors.New(notEtcd), false, nil
}

// SpeaksJobTLS says whether a store at endpoints completes the job's TLS
// handshake (tlsCfg: ClientTLS): a `gorun store` that holds the job's
// token.
func SpeaksJobTLS(ctx context.Context, endpoints []string, tlsCfg *tls.Config) bool {
	proven, _ := ProveJobStore(ctx, endpoints, tlsCfg)
	return proven
}

// ProveJobStore runs the job's TLS handshake (tlsCfg: ClientTLS) with
// each endpoint until one proves it holds the token (proven). Otherwise err is ErrNotJobStore
// when an endpoint answered and could not prove it, nil when none could
// be reached.
func ProveJobStore(ctx context.Context, endpoints []string, tlsCfg *tls.Config) (proven bool, err error) {
	for _, ep := range endpoints {
		dctx, cancel := context.WithTimeout(ctx, probeTimeout)
		d := net.Dialer{}
		c, derr := d.DialContext(dctx, "tcp", ep)
		cancel()
		if derr != nil {
			continue
		}
		c.SetDeadline(time.Now().Add(tlsProbeTimeout))
		herr := tls.Client(c, tlsCfg).Handshake()
		c.Close()
		if herr == nil {
			return true, nil
		}
		var record tls.RecordHeaderError
		if errors.Is(herr, ErrNotJobStore) || errors.As(herr, &record) {
			err = fmt.Errorf("%w at %s: %v", ErrNotJobStore, ep, herr)
		}
	}
	return false, err
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
func probeTLS(c net.Conn, host string, tlsCfg *tls.Config) (error, bool) {
	c.SetDeadline(time.Now().Add(tlsProbeTimeout))
	if tlsCfg == nil {
		tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, ServerName: host}) //nolint:gosec // only asks whether the port speaks TLS
		if err := tc.Handshake(); err == nil {
			return setting.Errorf("the port speaks TLS, but no TLS settings were given (%s, and %s, %s when it asks for client certificates)", setting.Name("Conf.cacert"), setting.Name("Conf.cert"), setting.Name("Conf.key")), true
		}
		return errors.New(notEtcd), false
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
			return errors.New(notEtcd), false
		}
	}
	var record tls.RecordHeaderError
	var verify *tls.CertificateVerificationError
	var op *net.OpError
	switch {
	case errors.As(err, &record):
		return setting.Errorf("the port does not speak TLS, but %s gives TLS files (%v)", setting.Name("Conf"), err), true
	case errors.As(err, &verify):
		return setting.Errorf("TLS: the server's certificate is not trusted: %v (check %s)", verify.Err, setting.Name("Conf.cacert")), true
	case errors.As(err, &op) && op.Op == "remote error":
		// The server sent an alert: it refused this client's certificate
		// or has none, or the versions and ciphers do not meet.
		return setting.Errorf("TLS: the server refused the connection: %v (check %s, %s)", op.Err, setting.Name("Conf.cert"), setting.Name("Conf.key")), true
	}
	return errors.New(notEtcd), false
}
