package etcd

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// The members of a job's store speak to each other over mutual TLS whose
// CA key every holder of the job token derives (Token.Derive): a member
// accepts raft messages only from a peer with a certificate signed by it,
// so a stranger who reaches the peer port can neither join the cluster nor
// inject messages. Each member makes its own CA certificate from the
// shared key (same subject and key, so that each verifies the others'
// certificates) and a certificate of its own for its peer address.

// peerCALabel derives the CA key from the token.
const peerCALabel = "gorun etcd peer CA v1"

// peerTLS writes the CA certificate and this member's certificate and key
// for host (its peer address's host) into dir (mode 0600) and returns
// etcd's TLS settings for the peer port.
func peerTLS(token Token, dir, host string) (transport.TLSInfo, error) {
	if len(token) == 0 {
		return transport.TLSInfo{}, fmt.Errorf("embedded etcd: a store of several members needs the job token (its members authenticate each other with it)")
	}
	seed := token.Derive(peerCALabel)
	caKey := ed25519.NewKeyFromSeed(seed[:ed25519.SeedSize])
	// The subject names the job's CA by its key, so that the CAs of two
	// jobs never look alike.
	sum := sha256.Sum256(caKey.Public().(ed25519.PublicKey))
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(sum[:8]),
		Subject:               pkix.Name{CommonName: "gorun job store " + hex.EncodeToString(sum[:8])},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return transport.TLSInfo{}, fmt.Errorf("embedded etcd: peer CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return transport.TLSInfo{}, err
	}
	leaf := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: "gorun store member " + host},
		NotBefore:    now.Add(-24 * time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		leaf.IPAddresses = []net.IP{ip}
	} else {
		leaf.DNSNames = []string{host}
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, pub, caKey)
	if err != nil {
		return transport.TLSInfo{}, fmt.Errorf("embedded etcd: peer certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	info := transport.TLSInfo{
		TrustedCAFile:  filepath.Join(dir, "peer-ca.crt"),
		CertFile:       filepath.Join(dir, "peer.crt"),
		KeyFile:        filepath.Join(dir, "peer.key"),
		ClientCertAuth: true,
		// A peer proves itself with a certificate of the job's CA; the
		// address it connects from (a multi-homed host picks its own; on
		// loopback it is 127.0.0.1) need not be the one its certificate
		// names, which etcd would otherwise require.
		SkipClientSANVerify: true,
	}
	for path, block := range map[string]*pem.Block{
		info.TrustedCAFile: {Type: "CERTIFICATE", Bytes: caDER},
		info.CertFile:      {Type: "CERTIFICATE", Bytes: leafDER},
		info.KeyFile:       {Type: "PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return transport.TLSInfo{}, fmt.Errorf("embedded etcd: peer TLS: %w", err)
		}
	}
	return info, nil
}
