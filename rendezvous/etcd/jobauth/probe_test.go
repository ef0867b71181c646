package jobauth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"io"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// testPKI is a CA and a certificate it signed for 127.0.0.1, usable by
// servers and clients.
type testPKI struct {
	pool *x509.CertPool
	cert tls.Certificate
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, leafKey := key(), key()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "node"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(caCert)
	return testPKI{pool: pool, cert: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey}}
}

// serve accepts connections on a loopback port until the test ends and
// hands each to handle.
func serve(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(5 * time.Second))
				handle(c)
			})
		}
	})
	return ln.Addr().String()
}

func TestDiagnose(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := ln.Addr().String()
	ln.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0") // accepts (backlog), never answers
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	pki, other := newTestPKI(t), newTestPKI(t)
	tlsServer := func(cfg *tls.Config) func(net.Conn) {
		return func(c net.Conn) {
			tc := tls.Server(c, cfg)
			if tc.Handshake() == nil {
				io.Copy(io.Discard, tc) // hold the connection, as a server would
			}
		}
	}
	mutual := serve(t, tlsServer(&tls.Config{Certificates: []tls.Certificate{pki.cert}, ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: pki.pool}))
	serverOnly := serve(t, tlsServer(&tls.Config{Certificates: []tls.Certificate{pki.cert}}))
	plain := serve(t, func(c net.Conn) { c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n")) })

	trusting := &tls.Config{RootCAs: pki.pool}
	withCert := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{pki.cert}}
	strangerCert := &tls.Config{RootCAs: pki.pool, Certificates: []tls.Certificate{other.cert}}
	for _, tt := range []struct {
		name      string
		ep        string
		tls       *tls.Config
		want      string
		permanent bool
	}{
		{"no such host", "no-such-host.invalid:2379", nil, "does not resolve", false},
		{"refused", refused, nil, "connection refused", false},
		{"silent", silent.Addr().String(), nil, "accepts connections", false},
		{"silent, TLS", silent.Addr().String(), trusting, "accepts connections", false},
		{"plain client, TLS port", serverOnly, nil, "the port speaks TLS", true},
		{"TLS client, plain port", plain, trusting, "does not speak TLS", true},
		{"server not trusted", serverOnly, &tls.Config{RootCAs: other.pool}, "not trusted", true},
		{"no client certificate", mutual, trusting, "refused the connection", true},
		{"another CA's client certificate", mutual, strangerCert, "refused the connection", true},
		{"TLS agrees", mutual, withCert, "accepts connections", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got := Diagnose(context.Background(), []string{tt.ep}, tt.tls, false)
			if !strings.Contains(got.Text, tt.want) || got.Permanent != tt.permanent {
				t.Errorf("Diagnose(%s) = %q, permanent %v; want %q, permanent %v", tt.ep, got.Text, got.Permanent, tt.want, tt.permanent)
			}
		})
	}
}
