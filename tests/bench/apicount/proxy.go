package apicount

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sort"
	"sync"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Count is the number of requests of one Key that got one status class.
type Count struct {
	Key
	// Conflict counts the 409 answers among N (a decision on a stale
	// view, refused by the resourceVersion precondition).
	N, Conflict int
}

// Counter accumulates request counts; safe for concurrent use.
type Counter struct {
	mu     sync.Mutex
	counts map[Key]*Count
}

// NewCounter returns an empty Counter.
func NewCounter() *Counter { return &Counter{counts: map[Key]*Count{}} }

// add counts a request as it arrives: a watch ends only when its client
// goes away, after the measured process has exited.
func (c *Counter) add(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(k).N++
}

// conflict counts a 409 answer to a request already counted.
func (c *Counter) conflict(k Key) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entry(k).Conflict++
}

func (c *Counter) entry(k Key) *Count {
	n := c.counts[k]
	if n == nil {
		n = &Count{Key: k}
		c.counts[k] = n
	}
	return n
}

// Snapshot returns the counts so far, sorted by verb then resource, and
// resets the counter.
func (c *Counter) Snapshot() []Count {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Count, 0, len(c.counts))
	for _, n := range c.counts {
		out = append(out, *n)
	}
	c.counts = map[Key]*Count{}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Verb != out[j].Verb {
			return out[i].Verb < out[j].Verb
		}
		return out[i].Resource < out[j].Resource
	})
	return out
}

// Proxy is a counting reverse proxy to an API server on loopback.
type Proxy struct {
	Counter *Counter
	srv     *http.Server
	ln      net.Listener
}

// Start serves plain HTTP on a free loopback port and forwards every
// request to the server of upstream with upstream's credentials, so the
// measured process needs no credentials of its own.
func Start(upstream *rest.Config) (*Proxy, error) {
	target, err := url.Parse(upstream.Host)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", upstream.Host, err)
	}
	rt, err := rest.TransportFor(upstream)
	if err != nil {
		return nil, fmt.Errorf("transport to %s: %w", upstream.Host, err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("counting proxy: listen: %w", err)
	}
	p := &Proxy{Counter: NewCounter(), ln: ln}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = target.Host
		},
		Transport: rt,
		// Watches stream: pass every event on at once.
		FlushInterval: -1,
	}
	p.srv = &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		k := Classify(r.Method, r.URL)
		p.Counter.add(k)
		rec := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, r)
		if rec.status == http.StatusConflict {
			p.Counter.conflict(k)
		}
	}), ReadHeaderTimeout: 0}
	go func() { _ = p.srv.Serve(ln) }()
	return p, nil
}

// URL is the proxy's address.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// WriteKubeconfig writes a kubeconfig that points at the proxy.
func (p *Proxy) WriteKubeconfig(path string) error { return writeKubeconfig(p.URL(), path) }

func writeKubeconfig(server, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["bench"] = &clientcmdapi.Cluster{Server: server}
	kc.AuthInfos["bench"] = &clientcmdapi.AuthInfo{}
	kc.Contexts["bench"] = &clientcmdapi.Context{Cluster: "bench", AuthInfo: "bench"}
	kc.CurrentContext = "bench"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write proxy kubeconfig %s: %w", path, err)
	}
	return nil
}

// Close stops the proxy, cutting open watches.
func (p *Proxy) Close() error {
	err := p.srv.Shutdown(context.Background())
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Flush passes watch events on (the reverse proxy flushes through it).
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the real writer.
func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }
