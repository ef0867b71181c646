package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
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
)

// testCA writes a CA, a server certificate for 127.0.0.1 and a client
// certificate into dir and returns their paths.
func testCA(t *testing.T, dir string) (ca, serverCert, serverKey, clientCert, clientKey string) {
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
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	leaf := func(serial int64, usage x509.ExtKeyUsage, name string) (string, string) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
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
	ca = write("ca.crt", "CERTIFICATE", caDER)
	serverCert, serverKey = leaf(2, x509.ExtKeyUsageServerAuth, "server")
	clientCert, clientKey = leaf(3, x509.ExtKeyUsageClientAuth, "client")
	return
}

// TestElasticExternalEtcdWithTLS: etcd that requires client certificates;
// the files come from --rdzv-conf and from the environment.
func TestElasticExternalEtcdWithTLS(t *testing.T) {
	t.Parallel()
	certs := t.TempDir()
	ca, srvCert, srvKey, cliCert, cliKey := testCA(t, certs)
	ep, _, _ := etcdServer(t, "https", "--cert-file="+srvCert, "--key-file="+srvKey, "--trusted-ca-file="+ca, "--client-cert-auth")

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
	// error naming the endpoint, within the join timeout.
	r := runGorun(t, testEnv(), "--rdzv-backend=etcd", "--rdzv-endpoint="+ep, "--rdzv-id=tls2", "--nnodes=2",
		"--rdzv-conf=cacert="+ca+",join_timeout=3", "--no-python", script, dir)
	if r.code == 0 || !strings.Contains(r.stderr, ep) {
		t.Errorf("no client certificate: exit %d\n%s", r.code, r.stderr)
	}
}
