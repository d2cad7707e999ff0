package node

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the node's certificate authority and the key pairs signed by it, as files under dir.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
}

func (p pki) path(name string) string { return filepath.Join(p.dir, name) }

// CA is the CA certificate file every component trusts.
func (p pki) CA() string { return p.path("ca.crt") }

// newPKI creates the CA under dir.
func newPKI(dir string) (pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return pki{}, fmt.Errorf("create %s: %w", dir, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return pki{}, fmt.Errorf("CA key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "crishim-node-ca"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(1, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return pki{}, fmt.Errorf("CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return pki{}, err
	}
	p := pki{dir: dir, caCert: cert, caKey: key}
	if err := writePEM(p.CA(), "CERTIFICATE", der, 0o644); err != nil {
		return pki{}, err
	}
	return p, nil
}

// keyPair is a certificate and key file pair.
type keyPair struct{ Cert, Key string }

// issue signs a certificate for name: a client certificate for cn in groups (the apiserver
// reads the CN as user and the O as groups), or a serving one when ips or dns are given.
func (p pki) issue(name, cn string, groups []string, ips []net.IP, dns []string) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("%s key: %w", name, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return keyPair{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn, Organization: groups},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().AddDate(1, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		IPAddresses:  ips,
		DNSNames:     dns,
	}
	if len(ips) > 0 || len(dns) > 0 {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return keyPair{}, fmt.Errorf("%s certificate: %w", name, err)
	}
	kp := keyPair{Cert: p.path(name + ".crt"), Key: p.path(name + ".key")}
	if err := writePEM(kp.Cert, "CERTIFICATE", der, 0o644); err != nil {
		return keyPair{}, err
	}
	if err := writeKey(kp.Key, key); err != nil {
		return keyPair{}, err
	}
	return kp, nil
}

// serviceAccountKeys writes the key pair that signs service-account tokens (RSA: every
// consumer of those tokens accepts RS256).
func (p pki) serviceAccountKeys() (keyPair, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return keyPair{}, fmt.Errorf("service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return keyPair{}, err
	}
	kp := keyPair{Cert: p.path("sa.pub"), Key: p.path("sa.key")}
	if err := writePEM(kp.Cert, "PUBLIC KEY", pub, 0o644); err != nil {
		return keyPair{}, err
	}
	return kp, writeKey(kp.Key, key)
}

func writeKey(path string, key crypto.Signer) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	return writePEM(path, "PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, mode); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// kubeconfig writes a kubeconfig for server that authenticates with kp.
func (p pki) kubeconfig(path, server string, kp keyPair) error {
	c := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: crishim-node
  cluster:
    server: %s
    certificate-authority: %s
users:
- name: user
  user:
    client-certificate: %s
    client-key: %s
contexts:
- name: crishim-node
  context:
    cluster: crishim-node
    user: user
    namespace: default
current-context: crishim-node
`, server, p.CA(), kp.Cert, kp.Key)
	if err := os.WriteFile(path, []byte(c), 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
