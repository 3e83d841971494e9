package rollout

import (
	"bytes"
	"io"
	"regexp"
	"sync"
)

// refusedEviction matches the line kubectl's drain library prints when the
// API server refuses an eviction (429: a PodDisruptionBudget) and it
// retries: error when evicting pods/"NAME" -n "NS" (will retry ...): ERR.
var refusedEviction = regexp.MustCompile(`error when evicting pods/"([^"]+)" -n "([^"]+)" \(will retry after [^)]*\): (.*)`)

// blockedWriter passes drain's log on and reports each pod whose eviction
// is refused once, so the node's events (and `npu-hooks status`) name the
// pod and the budget holding the node instead of a silent retry loop.
type blockedWriter struct {
	out     io.Writer
	report  func(pod, err string)
	mu      sync.Mutex
	pending []byte
	seen    map[string]bool
}

func newBlockedWriter(out io.Writer, report func(pod, err string)) *blockedWriter {
	return &blockedWriter{out: out, report: report, seen: map[string]bool{}}
}

func (w *blockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	w.pending = append(w.pending, p...)
	for {
		i := bytes.IndexByte(w.pending, '\n')
		if i < 0 {
			break
		}
		line := string(w.pending[:i])
		w.pending = w.pending[i+1:]
		if m := refusedEviction.FindStringSubmatch(line); m != nil {
			pod := m[2] + "/" + m[1]
			if !w.seen[pod] {
				w.seen[pod] = true
				w.mu.Unlock()
				w.report(pod, m[3])
				w.mu.Lock()
			}
		}
	}
	w.mu.Unlock()
	return w.out.Write(p)
}
