package jobauth

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"

	"go.etcd.io/etcd/client/pkg/v3/transport"
)

// The members of a job's store speak to each other over mutual TLS under
// the job's peer CA (jobca.go): a member accepts raft messages only from a
// peer with a certificate signed by it, so a stranger who reaches the peer
// port can neither join the cluster nor inject messages.

// peerCALabel derives the CA key from the token.
const peerCALabel = "gorun etcd peer CA v1"

// PeerTLS writes the CA certificate of token's peer CA and this member's
// certificate and key for host (its peer address's host) into dir (mode
// 0600) and returns etcd's TLS settings for the member's peer port.
func PeerTLS(token Token, dir, host string) (transport.TLSInfo, error) {
	if len(token) == 0 {
		return transport.TLSInfo{}, fmt.Errorf("embedded etcd: a store of several members needs the job token (its members authenticate each other with it)")
	}
	ca, err := newJobCA(token, peerCALabel)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	leafDER, key, err := ca.issue("gorun store member "+host, host)
	if err != nil {
		return transport.TLSInfo{}, err
	}
	caDER := ca.der
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
