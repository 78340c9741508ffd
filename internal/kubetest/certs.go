package kubetest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// credentials are the files the apiserver is started with.
type credentials struct {
	caFile, certFile, keyFile string // serving CA, certificate and key
	saPub, saKey              string // service-account token verification / signing keys
	tokenFile                 string // static tokens
	caPEM                     []byte
	adminToken, userToken     string
}

// writeCredentials generates a CA and a serving certificate for 127.0.0.1,
// a service-account key pair and a static token file, all under dir/pki.
func writeCredentials(dir string) (*credentials, error) {
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	cr := &credentials{
		caFile:    filepath.Join(pki, "ca.crt"),
		certFile:  filepath.Join(pki, "apiserver.crt"),
		keyFile:   filepath.Join(pki, "apiserver.key"),
		saPub:     filepath.Join(pki, "sa.pub"),
		saKey:     filepath.Join(pki, "sa.key"),
		tokenFile: filepath.Join(pki, "tokens.csv"),
	}
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "patchbay-kubetest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	srvKeyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		return nil, err
	}
	// RSA for service-account tokens: what every consumer of them accepts.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	cr.caPEM = pemBlock("CERTIFICATE", caDER)
	cr.adminToken, cr.userToken = randomHex(16), randomHex(16)
	// Static tokens: user,uid,"groups". The plain user gets only what RBAC
	// grants system:authenticated, to check that authorization is real.
	tokens := fmt.Sprintf("%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		cr.adminToken, AdminUser, "uid-admin", cr.userToken, PlainUser, "uid-user")
	files := []struct {
		path string
		data []byte
	}{
		{cr.caFile, cr.caPEM},
		{cr.certFile, pemBlock("CERTIFICATE", srvDER)},
		{cr.keyFile, pemBlock("PRIVATE KEY", srvKeyDER)},
		{cr.saKey, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))},
		{cr.saPub, pemBlock("PUBLIC KEY", saPubDER)},
		{cr.tokenFile, []byte(tokens)},
	}
	for _, f := range files {
		if err := os.WriteFile(f.path, f.data, 0o600); err != nil {
			return nil, err
		}
	}
	return cr, nil
}

// User names in the static token file.
const (
	AdminUser = "patchbay-admin" // group system:masters: allowed everything
	PlainUser = "patchbay-user"  // only system:authenticated
)

// WriteKubeconfig writes a kubeconfig for this cluster that authenticates
// with token (e.g. a ServiceAccount token, or c.Token).
func (c *Cluster) WriteKubeconfig(path, token string) error {
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: kubetest-user
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: kubetest-user
current-context: kubetest
`, c.URL, base64.StdEncoding.EncodeToString(c.CAPEM), token)
	return os.WriteFile(path, []byte(cfg), 0o600)
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	return n
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}
