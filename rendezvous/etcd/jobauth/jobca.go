package jobauth

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"fmt"
	"math/big"
	"net"
	"time"
)

// A job's certificate authorities: every holder of the job token derives
// the CA's key (Token.Derive, one label per use), so that each node makes
// its own CA certificate (same subject and key: each verifies the others'
// certificates) and signs certificates of its own. A certificate under
// the job's CA proves its holder has the token, and no secret crosses
// the wire.

// jobCA is a job's CA for one use: its certificate and key.
type jobCA struct {
	cert *x509.Certificate
	der  []byte
	key  ed25519.PrivateKey
}

// newJobCA derives the CA of token for label.
func newJobCA(token Token, label string) (*jobCA, error) {
	seed := token.Derive(label)
	key := ed25519.NewKeyFromSeed(seed[:ed25519.SeedSize])
	// The subject names the CA by its key, so that the CAs of two jobs (or
	// two uses) never look alike.
	sum := sha256.Sum256(key.Public().(ed25519.PublicKey))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          new(big.Int).SetBytes(sum[:8]),
		Subject:               pkix.Name{CommonName: "gorun job store " + hex.EncodeToString(sum[:8])},
		NotBefore:             now.Add(-24 * time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("embedded etcd: job CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &jobCA{cert: cert, der: der, key: key}, nil
}

// issue makes a key and a certificate under the CA, for host (an address
// or a name; "" for none) and both server and client authentication.
func (ca *jobCA) issue(commonName, host string) (der []byte, key ed25519.PrivateKey, err error) {
	pub, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	leaf := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: commonName},
		NotBefore:    now.Add(-24 * time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		leaf.IPAddresses = []net.IP{ip}
	} else if host != "" {
		leaf.DNSNames = []string{host}
	}
	der, err = x509.CreateCertificate(rand.Reader, leaf, ca.cert, pub, ca.key)
	if err != nil {
		return nil, nil, fmt.Errorf("embedded etcd: certificate: %w", err)
	}
	return der, key, nil
}

// pool is a certificate pool of the CA alone.
func (ca *jobCA) pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}
