package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/gorun-dev/gorun/rendezvous"
)

// testCerts are the paths of testCA's files.
type testCerts struct {
	CA                                    string
	ServerCert, ServerKey                 string // server authentication, for 127.0.0.1
	ClientCert, ClientKey                 string // client authentication
	NodeCert, NodeKey                     string // both: an embedded store's host is server and client
	StrangerCA, StrangerCert, StrangerKey string // another CA's node certificate
}

// testCA writes a CA, a server certificate for 127.0.0.1, a client
// certificate and a node certificate (both uses) into dir, and a node
// certificate of an unrelated CA, and returns their paths.
func testCA(t *testing.T, dir string) testCerts {
	t.Helper()
	var c testCerts
	var stranger testCerts
	oneCA(t, dir, "", &c)
	oneCA(t, dir, "stranger-", &stranger)
	c.StrangerCA, c.StrangerCert, c.StrangerKey = stranger.CA, stranger.NodeCert, stranger.NodeKey
	return c
}

// oneCA writes one CA and its leaf certificates, their names prefixed.
func oneCA(t *testing.T, dir, prefix string, c *testCerts) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gorun test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, prefix+name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, name string, usage ...x509.ExtKeyUsage) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: usage,
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	c.CA = write("ca.crt", "CERTIFICATE", caDER)
	c.ServerCert, c.ServerKey = leaf(2, "server", x509.ExtKeyUsageServerAuth)
	c.ClientCert, c.ClientKey = leaf(3, "client", x509.ExtKeyUsageClientAuth)
	c.NodeCert, c.NodeKey = leaf(4, "node", x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth)
}

// TestElasticExternalEtcdWithTLS: etcd that requires client certificates;
// the files come from --rdzv-conf and from the environment.
func TestElasticExternalEtcdWithTLS(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	tc := testCA(t, certs)
	ca, cliCert, cliKey := tc.CA, tc.ClientCert, tc.ClientKey
	ep, _, _ := etcdServer(t, "https", "--cert-file="+tc.ServerCert, "--key-file="+tc.ServerKey, "--trusted-ca-file="+ca, "--client-cert-auth")

	dir := t.TempDir()
	script := startWorker(t, "")
	var nodes []*node
	for i := range 2 {
		args := append([]string{"--rdzv-backend=etcd", "--rdzv-endpoint=" + ep, "--rdzv-id=tls", "--nnodes=2",
			"--local-addr=127.0.0." + strconv.Itoa(i+1), "--rdzv-conf=cacert=" + ca, "--no-python", script}, dir)
		cmd, out, errb := startGorun(t, testEnv("GORUN_RDZV_CERT="+cliCert, "GORUN_RDZV_KEY="+cliKey), args...)
		nodes = append(nodes, &node{cmd, out, errb})
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Fatalf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	if got := starts(dir); got["0.2.0"] != 1 || got["1.2.0"] != 1 {
		t.Errorf("starts %v", got)
	}
	// Without a client certificate the connection is refused: a clear
	// error naming the endpoint and the settings to check, at once (no
	// retrying can fix a TLS mismatch).
	r := runGorun(t, testEnv(), "--rdzv-backend=etcd", "--rdzv-endpoint="+ep, "--rdzv-id=tls2", "--nnodes=2",
		"--rdzv-conf=cacert="+ca+",join_timeout=3", "--no-python", script, dir)
	if r.code == 0 || !strings.Contains(r.stderr, ep) || !strings.Contains(r.stderr, "refused the connection") || strings.Contains(r.stderr, "retrying") {
		t.Errorf("no client certificate: exit %d\n%s", r.code, r.stderr)
	}
}

// TestEmbeddedStoreWithTLS: the embedded store's client port is mutual
// TLS when every node gives cert, key and cacert (each node's certificate
// serves as the host's server certificate and as a client certificate).
// While the job runs, a client that knows the job's password but speaks
// plain HTTP, brings no certificate, or a certificate of another CA, is
// refused; the job completes.
func TestEmbeddedStoreWithTLS(t *testing.T) {
	t.Parallel()
	tc := testCA(t, t.TempDir())
	dir := t.TempDir()
	ep := "127.0.0.1:" + strconv.Itoa(freePort(t, "127.0.0.1"))
	script := startWorker(t, `while [ ! -e "$1/go" ]; do sleep 0.02; done`)
	conf := "--rdzv-conf=cert=" + tc.NodeCert + ",key=" + tc.NodeKey + ",cacert=" + tc.CA
	nodes := startNodes(t, 2, func(i int) []string {
		return append(elasticArgs(ep, "tls", i, "--nnodes=2", conf, "--no-python", script), dir)
	})
	waitStarts(t, dir, "0.2.0", "1.2.0")

	password := rendezvous.Token(testToken).EtcdPassword()
	loadTLS := func(cert, key, ca string) *tls.Config {
		info := transport.TLSInfo{CertFile: cert, KeyFile: key, TrustedCAFile: ca}
		cfg, err := info.ClientConfig()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		tls  *tls.Config
		ok   bool
	}{
		{"plain HTTP", nil, false},
		{"no client certificate", loadTLS("", "", tc.CA), false},
		{"another CA's certificate", loadTLS(tc.StrangerCert, tc.StrangerKey, tc.CA), false},
		{"the job's certificate", loadTLS(tc.NodeCert, tc.NodeKey, tc.CA), true},
	} {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, DialTimeout: 3 * time.Second, Logger: zap.NewNop(),
			TLS: c.tls, Username: rendezvous.EtcdUser, Password: password, Context: cctx})
		if err == nil {
			_, err = cli.Get(cctx, "/gorun/tls/", clientv3.WithPrefix())
			cli.Close()
		}
		ccancel()
		if (err == nil) != c.ok {
			t.Errorf("%s: read the job's keys: err %v; want refused %v", c.name, err, !c.ok)
		}
	}
	// A node without the TLS settings is told so at once.
	r := runGorun(t, testEnv(), append(elasticArgs(ep, "tls", 2, "--nnodes=2", "--no-python", script), dir)...)
	if r.code == 0 || !strings.Contains(r.stderr, "the port speaks TLS") {
		t.Errorf("a node without TLS settings: exit %d\n%s", r.code, r.stderr)
	}
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		if code := waitExit(t, n.cmd); code != 0 {
			t.Errorf("node %d exit %d\n%s", i, code, n.stderr)
		}
	}
	if !strings.Contains(nodes[0].stderr.String(), "authentication on, TLS") {
		t.Errorf("the host did not say its store is TLS:\n%s", nodes[0].stderr)
	}
}
