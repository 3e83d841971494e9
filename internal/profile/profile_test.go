package profile

import (
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	testingclock "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// The goroutines started between two samples are in the peak, stamped
// with the tick that saw them, not with the end of the run; the profiles
// written at Stop parse as CPU and heap profiles.
func TestPeaksHoldTheGoroutinesOfTheRunAndTheProfilesParse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "prof")
	fc := testingclock.NewFakeClock(t0)
	sampled := make(chan struct{}, 1)
	s, err := start(dir, Options{Clock: fc, Interval: time.Second}, func() {
		select {
		case sampled <- struct{}{}:
		default:
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	base := runtime.NumGoroutine()
	const extra = 200
	release := make(chan struct{})
	var running, exited sync.WaitGroup
	running.Add(extra)
	exited.Add(extra)
	for range extra {
		go func() {
			defer exited.Done()
			running.Done()
			<-release
		}()
	}
	running.Wait()
	fc.Step(time.Second)
	select {
	case <-sampled:
	case <-time.After(30 * time.Second):
		t.Fatal("no sample after the tick")
	}
	tick := fc.Now()
	close(release)
	exited.Wait()
	fc.Step(time.Minute)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	p, err := ReadPeaks(filepath.Join(dir, PeakFile))
	if err != nil {
		t.Fatal(err)
	}
	if p.Goroutines.Value < uint64(base+extra) {
		t.Errorf("goroutine peak %d, want at least %d (%d before + %d started)", p.Goroutines.Value, base+extra, base, extra)
	}
	if !p.Goroutines.At.Equal(tick) || p.Goroutines.AfterSeconds != 1 {
		t.Errorf("goroutine peak at %s (%.0f s in), want the tick at %s (1 s in)", p.Goroutines.At, p.Goroutines.AfterSeconds, tick)
	}
	if p.Samples < 3 || p.HeapInUse.Value == 0 || !p.Stopped.Equal(tick.Add(time.Minute)) || p.IntervalSeconds != 1 {
		t.Errorf("peaks %+v: want at least 3 samples, a heap in use and the stop a minute after the tick", p)
	}
	for name, want := range map[string]string{CPUFile: "cpu", HeapFile: "inuse_space", HeapPeakFile: "inuse_space"} {
		if typ := parse(t, filepath.Join(dir, name)); !contains(typ, want) {
			t.Errorf("%s has sample types %q, want %q among them", name, typ, want)
		}
	}
}

func parse(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	p, err := profile.Parse(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var types []string
	for _, st := range p.SampleType {
		types = append(types, st.Type)
	}
	return types
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// A request is timed to the end of its body, not to its headers; a watch
// is counted apart; a transport error is a failed request.
func TestAPIWaitTimesRequestsToTheEndOfTheBody(t *testing.T) {
	fc := testingclock.NewFakeClock(t0)
	more := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("watch") == "true" {
			return
		}
		fc.Step(30 * time.Millisecond)
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-more
		_, _ = io.WriteString(w, "the rest of the list")
	}))
	defer srv.Close()
	dir := t.TempDir()
	s, err := Start(dir, Options{Clock: fc, Interval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: s.WrapTransport(http.DefaultTransport)}
	resp, err := client.Get(srv.URL + "/api/v1/nodes")
	if err != nil {
		t.Fatal(err)
	}
	// Headers are in after 30 ms; the body ends 20 ms later.
	fc.Step(20 * time.Millisecond)
	close(more)
	if _, err := io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	w, err := client.Get(srv.URL + "/api/v1/nodes?watch=true")
	if err != nil {
		t.Fatal(err)
	}
	_ = w.Body.Close()
	broken := &http.Client{Transport: s.WrapTransport(roundTripFunc(func(*http.Request) (*http.Response, error) {
		fc.Step(5 * time.Millisecond)
		return nil, errors.New("connection refused")
	}))}
	req, _ := http.NewRequest(http.MethodPatch, srv.URL+"/api/v1/nodes/n1", nil)
	if resp, err := broken.Do(req); err == nil {
		_ = resp.Body.Close()
		t.Fatal("the broken transport answered")
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	p, err := ReadPeaks(filepath.Join(dir, PeakFile))
	if err != nil {
		t.Fatal(err)
	}
	a := p.API
	if a.Requests != 2 || a.Watches != 1 || a.Failed != 1 || !near(a.Seconds, 0.055) || !near(a.MaxSeconds, 0.05) {
		t.Errorf("api %+v: want 2 requests (50 ms to the end of the body, a failed 5 ms PATCH), 1 watch", a)
	}
	if g := a.ByMethod[http.MethodGet]; g.Requests != 1 || !near(g.Seconds, 0.05) {
		t.Errorf("GET %+v: want one of 50 ms", g)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// A directory that cannot be made is an error naming it, and no CPU
// profile is left running (the next Start would fail otherwise).
func TestStartRefusesAFileAsItsDirectory(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Start(file, Options{Clock: testingclock.NewFakeClock(t0), Interval: time.Second})
	if err == nil || !strings.Contains(err.Error(), file) {
		t.Fatalf("Start on a file: %v, want an error naming %s", err, file)
	}
	s, err := Start(t.TempDir(), Options{Clock: testingclock.NewFakeClock(t0), Interval: time.Second})
	if err != nil {
		t.Fatalf("Start after a refused one: %v", err)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
}
