package jobauth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
)

// The client port of a store that has a job token speaks TLS under the
// job's client CA: the store proves it holds the token before a client
// sends anything (its password included), and a client proves it before
// the store gives it a descriptor of etcd's. A squatter on the port, or
// a stranger who reaches it, learns nothing that can be replayed.

// clientCALabel derives the key of the client port's CA from the token.
const clientCALabel = "gorun etcd client CA v1"

// ErrNotJobStore: the server at an endpoint did not prove it holds the
// job's token (no certificate under the job's CA): another user's or
// another job's process, or a store of an earlier job. Nothing secret
// was sent to it.
var ErrNotJobStore = errors.New("not this job's store")

// notJobStoreError is ErrNotJobStore with what the check found.
type notJobStoreError struct{ reason string }

func (e *notJobStoreError) Error() string {
	return ErrNotJobStore.Error() + ": the server cannot prove it holds the job's token (" + e.reason + ")"
}
func (e *notJobStoreError) Is(target error) bool { return target == ErrNotJobStore }

// ForeignCertError is ErrNotJobStore from a server whose TLS certificate
// is not under the job's CA: another job's store, or a store that serves
// TLS files of the user's.
type ForeignCertError struct{ Err error }

func (e *ForeignCertError) Error() string {
	return ErrNotJobStore.Error() + ": its TLS certificate is not under the job's CA: " + e.Err.Error()
}
func (e *ForeignCertError) Is(target error) bool { return target == ErrNotJobStore }
func (e *ForeignCertError) Unwrap() error        { return e.Err }

// ClientTLS is the TLS of a client of a job's embedded store (a store
// with token): it accepts only a server with a certificate under the
// job's CA (whatever address it is reached at: the certificate, not the
// address, proves it) and presents a certificate of its own.
func ClientTLS(token Token) (*tls.Config, error) {
	if len(token) == 0 {
		return nil, fmt.Errorf("embedded etcd: the store's client TLS needs the job token")
	}
	ca, err := newJobCA(token, clientCALabel)
	if err != nil {
		return nil, err
	}
	der, key, err := ca.issue("gorun job client", "")
	if err != nil {
		return nil, err
	}
	roots := ca.pool()
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		// The chain is verified below, without a host name: the store's
		// certificate names none (an agent reaches it by any of its host's
		// names and addresses).
		InsecureSkipVerify: true, //nolint:gosec // VerifyConnection verifies the chain
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return &notJobStoreError{"it presented no certificate"}
			}
			opts := x509.VerifyOptions{Roots: roots, Intermediates: x509.NewCertPool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return &ForeignCertError{Err: err}
			}
			return nil
		},
	}, nil
}

// PresenceProto is the ALPN protocol of a node's presence connection to
// the client port of a job's store: ServerTLS offers it beside HTTP/2,
// and a node's presence connection names it (package jobstore serves it,
// package etcd holds it).
const PresenceProto = "gorun-presence/1"

// ServerTLS is the TLS of a job's store's client port for token: a
// certificate under the job's CA, and clients must present one too.
// gRPC needs HTTP/2 named in the handshake (ALPN); a node's presence
// connection names PresenceProto.
func ServerTLS(token Token) (*tls.Config, error) {
	ca, err := newJobCA(token, clientCALabel)
	if err != nil {
		return nil, err
	}
	der, key, err := ca.issue("gorun job store", "")
	if err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.pool(),
		NextProtos:   []string{"h2", PresenceProto},
	}, nil
}
