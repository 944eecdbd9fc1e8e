package host

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"

	"github.com/berthd/berth/spec"
)

// CheckTLSFiles checks the PEM files of t as a TLS client loads them: the
// ca file must hold at least one PEM certificate, and cert and key must
// load as a pair (crypto/tls.LoadX509KeyPair). It returns the error of
// each key that fails ("ca", "cert", or "key" when the key file cannot be
// read), naming the file; nil when all pass. Absent files are not checked
// (a missing cert or key is the decoder's problem).
func CheckTLSFiles(t spec.TLS) map[string]error {
	errs := map[string]error{}
	if t.CA != "" {
		if b, err := os.ReadFile(t.CA); err != nil {
			errs["ca"] = fmt.Errorf("CA file: %w", err)
		} else if !x509.NewCertPool().AppendCertsFromPEM(b) {
			errs["ca"] = fmt.Errorf("CA file %s: holds no PEM certificate", t.CA)
		}
	}
	if t.Cert != "" && t.Key != "" {
		_, certErr := os.Stat(t.Cert)
		if certErr != nil {
			errs["cert"] = fmt.Errorf("certificate file: %w", certErr)
		}
		_, keyErr := os.Stat(t.Key)
		if keyErr != nil {
			errs["key"] = fmt.Errorf("key file: %w", keyErr)
		}
		if certErr == nil && keyErr == nil {
			if _, err := tls.LoadX509KeyPair(t.Cert, t.Key); err != nil {
				errs["cert"] = fmt.Errorf("certificate %s and key %s: %w", t.Cert, t.Key, err)
			}
		}
	}
	if len(errs) == 0 {
		return nil
	}
	return errs
}
