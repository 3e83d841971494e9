package profile

import (
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// APIWait is how long a process waited on the Kubernetes API server: the
// time of its requests, from sending to the end of the response body.
// The client's own rate limiting comes before the transport and is not
// in it.
type APIWait struct {
	// Requests are the requests that ended, watches aside, and Seconds
	// the sum of their times: concurrent requests each count their own
	// time, so the sum can exceed the run's wall.
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
	// MaxSeconds is the longest request.
	MaxSeconds float64 `json:"maxSeconds"`
	// Failed are the requests that got no response (a transport error);
	// they are in Requests and Seconds too.
	Failed int64 `json:"failed"`
	// Watches are the watch requests opened. A watch waits for changes,
	// not for the server, so its time is in no other figure.
	Watches int64 `json:"watches"`
	// ByMethod splits Requests and Seconds by HTTP method: GET are gets
	// and lists, the others writes.
	ByMethod map[string]MethodWait `json:"byMethod,omitempty"`
}

// MethodWait is the requests of one HTTP method and their summed time.
type MethodWait struct {
	Requests int64   `json:"requests"`
	Seconds  float64 `json:"seconds"`
}

// apiCounter sums the requests of every client wrapped by one Session.
type apiCounter struct {
	clock clock.PassiveClock
	mu    sync.Mutex
	w     APIWait
}

func (c *apiCounter) watch() {
	c.mu.Lock()
	c.w.Watches++
	c.mu.Unlock()
}

func (c *apiCounter) add(method string, d time.Duration, failed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.w.Requests++
	c.w.Seconds += d.Seconds()
	c.w.MaxSeconds = max(c.w.MaxSeconds, d.Seconds())
	if failed {
		c.w.Failed++
	}
	m := c.w.ByMethod[method]
	m.Requests++
	m.Seconds += d.Seconds()
	c.w.ByMethod[method] = m
}

func (c *apiCounter) snapshot() APIWait {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.w
	w.ByMethod = make(map[string]MethodWait, len(c.w.ByMethod))
	for k, v := range c.w.ByMethod {
		w.ByMethod[k] = v
	}
	return w
}

// timedTransport times the requests through it into an apiCounter.
type timedTransport struct {
	next http.RoundTripper
	c    *apiCounter
}

func (t *timedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if isWatch(req) {
		t.c.watch()
		return t.next.RoundTrip(req)
	}
	start := t.c.clock.Now()
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil {
		t.c.add(req.Method, t.c.clock.Since(start), err != nil)
		return resp, err
	}
	// The response headers are not the end of the wait: a LIST's items
	// are still on their way, so the time ends with the body.
	resp.Body = &timedBody{ReadCloser: resp.Body, done: func() { t.c.add(req.Method, t.c.clock.Since(start), false) }}
	return resp, nil
}

// WrappedRoundTripper lets client-go reach the transport underneath (to
// close its idle connections, for one).
func (t *timedTransport) WrappedRoundTripper() http.RoundTripper { return t.next }

// isWatch tells a watch (client-go's ?watch=true) from a request.
func isWatch(req *http.Request) bool {
	switch req.URL.Query().Get("watch") {
	case "true", "1":
		return true
	}
	return false
}

// timedBody calls done once, at the end of the body or its close,
// whichever comes first.
type timedBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *timedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil {
		b.once.Do(b.done)
	}
	return n, err
}

func (b *timedBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}
