package devcluster

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

// pki is the cluster's self-signed certificate authority and the files it
// issued, all under dir.
type pki struct {
	dir    string
	caCert *x509.Certificate
	caKey  crypto.Signer
	caPEM  []byte
}

// certFiles are the PEM-encoded certificate and key of one identity.
type certFiles struct {
	CertFile, KeyFile string
	CertPEM, KeyPEM   []byte
}

const certValidity = 365 * 24 * time.Hour

// newPKI creates a CA and writes ca.crt and ca.key into dir.
func newPKI(dir string) (*pki, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "lull-dev-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, caCert: cert, caKey: key, caPEM: pemBlock("CERTIFICATE", der)}
	if _, err := p.write("ca", p.caPEM, key); err != nil {
		return nil, err
	}
	return p, nil
}

// CAFile is the path of the CA certificate.
func (p *pki) CAFile() string { return filepath.Join(p.dir, "ca.crt") }

// CAKeyFile is the path of the CA private key.
func (p *pki) CAKeyFile() string { return filepath.Join(p.dir, "ca.key") }

// serving issues a TLS server certificate for the given DNS names and IPs.
func (p *pki) serving(name string, dnsNames []string, ips []net.IP) (certFiles, error) {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// client issues a client certificate: the apiserver maps CN to the user
// name and O to groups.
func (p *pki) client(name, user string, groups ...string) (certFiles, error) {
	return p.issue(name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (p *pki) issue(name string, tmpl *x509.Certificate) (certFiles, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return certFiles{}, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.caCert, key.Public(), p.caKey)
	if err != nil {
		return certFiles{}, fmt.Errorf("issue %s certificate: %w", name, err)
	}
	return p.write(name, pemBlock("CERTIFICATE", der), key)
}

// write stores name.crt and name.key.
func (p *pki) write(name string, certPEM []byte, key crypto.Signer) (certFiles, error) {
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return certFiles{}, err
	}
	f := certFiles{
		CertFile: filepath.Join(p.dir, name+".crt"),
		KeyFile:  filepath.Join(p.dir, name+".key"),
		CertPEM:  certPEM,
		KeyPEM:   pemBlock("PRIVATE KEY", keyDER),
	}
	if err := os.WriteFile(f.CertFile, f.CertPEM, 0o644); err != nil {
		return certFiles{}, err
	}
	if err := os.WriteFile(f.KeyFile, f.KeyPEM, 0o600); err != nil {
		return certFiles{}, err
	}
	return f, nil
}

// serviceAccountKeys writes an RSA key pair (sa.key, sa.pub) that the
// apiserver signs and verifies service account tokens with and returns
// their paths.
func (p *pki) serviceAccountKeys() (keyFile, pubFile string, err error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return "", "", err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return "", "", err
	}
	keyFile = filepath.Join(p.dir, "sa.key")
	pubFile = filepath.Join(p.dir, "sa.pub")
	if err := os.WriteFile(keyFile, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(key)), 0o600); err != nil {
		return "", "", err
	}
	if err := os.WriteFile(pubFile, pemBlock("PUBLIC KEY", pub), 0o644); err != nil {
		return "", "", err
	}
	return keyFile, pubFile, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 126))
	if err != nil {
		panic(err)
	}
	return n
}
