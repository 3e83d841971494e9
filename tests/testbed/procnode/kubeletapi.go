package procnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"strings"
	"time"
)

// serveKubeletAPI serves the one kubelet endpoint the API server proxies
// that people and Helm need here: container logs (`kubectl logs`, and the
// failed hook's log Helm prints). It returns the port for the Node's
// daemonEndpoints. The API server does not verify kubelet serving
// certificates unless told to, so a throwaway self-signed one does.
func (n *Node) serveKubeletAPI() (int, func(), error) {
	cert, err := selfSigned(n.cfg.Name)
	if err != nil {
		return 0, nil, err
	}
	ln, err := net.Listen("tcp", nodeIP+":0")
	if err != nil {
		return 0, nil, fmt.Errorf("node %s: kubelet API listener: %w", n.cfg.Name, err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/containerLogs/", func(w http.ResponseWriter, r *http.Request) {
		parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/containerLogs/"), "/")
		if len(parts) != 3 {
			http.Error(w, "want /containerLogs/<namespace>/<pod>/<container>", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write([]byte(n.Logs(parts[0], parts[1], parts[2])))
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return ln.Addr().(*net.TCPAddr).Port, func() { _ = srv.Close() }, nil
}

func selfSigned(name string) (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet API key: %w", err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		IPAddresses:  []net.IP{net.ParseIP(nodeIP)},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("kubelet API certificate: %w", err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}
