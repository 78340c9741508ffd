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
	"strings"
	"time"
)

// Credentials are the files an apiserver starts with: a CA, a serving
// certificate for 127.0.0.1 (and any extra addresses), a service-account key
// pair and a static token file. internal/nodetest shares them.
type Credentials struct {
	CAFile, CertFile, KeyFile string            // serving CA, certificate and key (PEM)
	SAPub, SAKey              string            // service-account token verification / signing keys
	TokenFile                 string            // static tokens: token,user,uid,"groups"
	CAPEM                     []byte            // contents of CAFile
	AdminToken                string            // AdminUser (group system:masters)
	UserToken                 string            // PlainUser (no rights beyond system:authenticated)
	Tokens                    map[string]string // user name → token, for the extra users
}

// StaticUser is an extra user of the static token file.
type StaticUser struct {
	Name   string   // e.g. "system:node:node-1"
	Groups []string // e.g. ["system:nodes"]
}

// WriteCredentials generates the credentials under dir/pki. The serving
// certificate is valid for 127.0.0.1, the names of the kubernetes Service
// and ips; extra users get a token each besides AdminUser and PlainUser.
func WriteCredentials(dir string, ips []net.IP, extra ...StaticUser) (*Credentials, error) {
	pki := filepath.Join(dir, "pki")
	if err := os.MkdirAll(pki, 0o700); err != nil {
		return nil, err
	}
	cr := &Credentials{
		CAFile:    filepath.Join(pki, "ca.crt"),
		CertFile:  filepath.Join(pki, "apiserver.crt"),
		KeyFile:   filepath.Join(pki, "apiserver.key"),
		SAPub:     filepath.Join(pki, "sa.pub"),
		SAKey:     filepath.Join(pki, "sa.key"),
		TokenFile: filepath.Join(pki, "tokens.csv"),
		Tokens:    map[string]string{},
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
		IPAddresses:  append([]net.IP{net.IPv4(127, 0, 0, 1)}, ips...),
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
	cr.CAPEM = pemBlock("CERTIFICATE", caDER)
	cr.AdminToken, cr.UserToken = randomHex(16), randomHex(16)
	// Static tokens: token,user,uid,"groups". The plain user gets only what
	// RBAC grants system:authenticated, to check that authorization is real.
	var tokens strings.Builder
	fmt.Fprintf(&tokens, "%s,%s,%s,\"system:masters\"\n%s,%s,%s\n",
		cr.AdminToken, AdminUser, "uid-admin", cr.UserToken, PlainUser, "uid-user")
	for i, u := range extra {
		tok := randomHex(16)
		cr.Tokens[u.Name] = tok
		fmt.Fprintf(&tokens, "%s,%s,uid-extra-%d,\"%s\"\n", tok, u.Name, i, strings.Join(u.Groups, ","))
	}
	files := []struct {
		path string
		data []byte
	}{
		{cr.CAFile, cr.CAPEM},
		{cr.CertFile, pemBlock("CERTIFICATE", srvDER)},
		{cr.KeyFile, pemBlock("PRIVATE KEY", srvKeyDER)},
		{cr.SAKey, pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey))},
		{cr.SAPub, pemBlock("PUBLIC KEY", saPubDER)},
		{cr.TokenFile, []byte(tokens.String())},
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
	return os.WriteFile(path, Kubeconfig(c.URL, c.CAPEM, token), 0o600)
}

// Kubeconfig returns a kubeconfig for the apiserver at server (trusting
// caPEM) that authenticates with a bearer token.
func Kubeconfig(server string, caPEM []byte, token string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
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
`, server, base64.StdEncoding.EncodeToString(caPEM), token))
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
