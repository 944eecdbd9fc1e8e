package testutil

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
	"testing"
	"time"
)

// CA is a certificate authority made for one test (crypto/x509, ECDSA
// P-256), whose files live in the test's temporary directory.
type CA struct {
	// File is the CA certificate in PEM: what a client's ca or a server's
	// client_ca_file names.
	File string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	dir  string
	t    testing.TB
}

// NewCA makes a CA valid for one hour, named cn.
func NewCA(t testing.TB, cn string) *CA {
	t.Helper()
	der, key := newCert(t, cn, &x509.Certificate{
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}, nil, nil)
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: t.TempDir(), t: t}
	ca.File = ca.write(cn+"-ca.pem", "CERTIFICATE", der)
	return ca
}

// Issue makes a certificate signed by ca for common name cn, usable by a
// server and by a client, whose subject alternative names are hosts (IP
// addresses or DNS names), and returns the paths of the certificate and of
// its private key (PEM, mode 0600).
func (ca *CA) Issue(cn string, hosts ...string) (certFile, keyFile string) {
	t := ca.t
	t.Helper()
	tmpl := &x509.Certificate{
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, key := newCert(t, cn, tmpl, ca.cert, ca.key)
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return ca.write(cn+".pem", "CERTIFICATE", der), ca.write(cn+"-key.pem", "PRIVATE KEY", kder)
}

// newCert makes a P-256 key and a certificate for it from tmpl, named cn,
// valid from a minute ago for an hour, with a fresh serial, signed by
// parent with parentKey (nil: self-signed), and returns its DER and the key.
func newCert(t testing.TB, cn string, tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey) ([]byte, *ecdsa.PrivateKey) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl.SerialNumber = serial(t)
	tmpl.Subject = pkix.Name{CommonName: cn}
	tmpl.NotBefore, tmpl.NotAfter = time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	if parent == nil {
		parent, parentKey = tmpl, key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		t.Fatal(err)
	}
	return der, key
}

func (ca *CA) write(name, typ string, der []byte) string {
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}
