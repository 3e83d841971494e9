// Package profile keeps the profiles of one process run: a CPU profile of
// the whole run, heap profiles at the heap's peak and at exit, and the
// peaks of its goroutines and heap in use, sampled as it runs, with the
// time its Kubernetes API requests took. `npu-hooks rollout
// --profile-dir` writes them, and the benchmark (make bench) reports them
// beside its results, so the rollout's cost per node is read from the run
// itself, not estimated.
package profile

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/atomicfile"
)

// The files of a profile directory.
const (
	CPUFile      = "cpu.pprof"
	HeapFile     = "heap.pprof"
	HeapPeakFile = "heap-peak.pprof"
	PeakFile     = "peak.json"
)

// DefaultInterval is how often the goroutines and the heap are sampled:
// often enough to catch the peak of a rollout that runs minutes, rare
// enough to cost nothing measurable (a runtime/metrics read does not stop
// the world).
const DefaultInterval = time.Second

// heapPeakStep is how much the heap in use must have grown since the last
// heap-peak.pprof before it is written again: a profile at every new
// byte of peak would cost more than the sampling, one per 10% of growth
// is a few dozen over a run.
const heapPeakStep = 1.1

// Options configure a Session.
type Options struct {
	// Clock paces the sampling and stamps the peaks (clock.RealClock{} in
	// the binaries, a fake one in tests).
	Clock clock.WithTicker
	// Interval is the time between two samples.
	Interval time.Duration
}

// Peak is the highest value a sample saw, and when it first did.
type Peak struct {
	Value uint64    `json:"value"`
	At    time.Time `json:"at"`
	// AfterSeconds is At from the session's start.
	AfterSeconds float64 `json:"afterSeconds"`
}

// Peaks is the content of peak.json.
type Peaks struct {
	Started         time.Time `json:"started"`
	Stopped         time.Time `json:"stopped"`
	IntervalSeconds float64   `json:"sampleIntervalSeconds"`
	Samples         int       `json:"samples"`
	Goroutines      Peak      `json:"goroutines"`
	// HeapInUse is the bytes of heap spans in use (live and not yet swept
	// objects, and the free space inside those spans: MemStats.HeapInuse).
	HeapInUse Peak `json:"heapInUseBytes"`
	// API is the time the process's Kubernetes API requests took (zero
	// when its clients were not wrapped with WrapTransport).
	API APIWait `json:"api"`
}

// runtime/metrics names read by a sample.
const (
	metricGoroutines  = "/sched/goroutines:goroutines"
	metricHeapObjects = "/memory/classes/heap/objects:bytes"
	metricHeapUnused  = "/memory/classes/heap/unused:bytes"
)

// Session is a run under profiling, from Start to Stop.
type Session struct {
	dir      string
	clock    clock.WithTicker
	interval time.Duration
	cpu      *os.File
	api      apiCounter

	ticker clock.Ticker
	stop   chan struct{}
	done   chan struct{}

	mu       sync.Mutex
	peaks    Peaks
	metrics  []metrics.Sample
	heapSave uint64 // heap in use at the last heap-peak.pprof
	heapErr  error  // the first failure to write heap-peak.pprof
	// afterSample, if set, is called after each sample the ticker
	// paced: tests wait on it instead of sleeping.
	afterSample func()
}

// Start creates dir, starts the CPU profile and the sampling. Only one
// Session may run at a time in a process: the runtime has one CPU
// profiler.
func Start(dir string, o Options) (*Session, error) { return start(dir, o, nil) }

// start is Start with a hook called after each paced sample, set before
// the sampling goroutine starts so it needs no lock.
func start(dir string, o Options, afterSample func()) (*Session, error) {
	if o.Clock == nil || o.Interval <= 0 {
		return nil, fmt.Errorf("profile: a clock and a positive interval are needed (interval %s)", o.Interval)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("profile directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, CPUFile)
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("CPU profile %s: %w", path, err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start the CPU profile %s: %w", path, err)
	}
	s := &Session{dir: dir, clock: o.Clock, interval: o.Interval, cpu: f, api: apiCounter{clock: o.Clock, w: APIWait{ByMethod: map[string]MethodWait{}}},
		stop: make(chan struct{}), done: make(chan struct{}), afterSample: afterSample,
		metrics: []metrics.Sample{{Name: metricGoroutines}, {Name: metricHeapObjects}, {Name: metricHeapUnused}}}
	s.peaks.Started = o.Clock.Now()
	s.peaks.IntervalSeconds = o.Interval.Seconds()
	s.sample()
	// The ticker exists before Start returns, so a tick of a fake clock
	// stepped right after it is never missed.
	s.ticker = o.Clock.NewTicker(o.Interval)
	go s.loop()
	return s, nil
}

func (s *Session) loop() {
	defer close(s.done)
	defer s.ticker.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-s.ticker.C():
			s.sample()
			if s.afterSample != nil {
				s.afterSample()
			}
		}
	}
}

// sample reads the goroutine count and the heap in use and keeps the
// peaks; a new heap peak well above the last one saved is written to
// heap-peak.pprof, which shows what the heap held at its highest.
func (s *Session) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	metrics.Read(s.metrics)
	now := s.clock.Now()
	s.peaks.Samples++
	raise(&s.peaks.Goroutines, value(s.metrics[0]), now, s.peaks.Started)
	heap := value(s.metrics[1]) + value(s.metrics[2])
	raise(&s.peaks.HeapInUse, heap, now, s.peaks.Started)
	if float64(heap) >= float64(s.heapSave)*heapPeakStep {
		s.heapSave = heap
		if err := s.writeHeap(HeapPeakFile, false); err != nil && s.heapErr == nil {
			s.heapErr = err
		}
	}
}

// value is a sample's value; 0 for a metric this Go release does not have
// (KindBad), so a renamed metric shows as a zero peak, not a crash.
func value(m metrics.Sample) uint64 {
	if m.Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return m.Value.Uint64()
}

func raise(p *Peak, v uint64, now, start time.Time) {
	if v > p.Value {
		*p = Peak{Value: v, At: now, AfterSeconds: now.Sub(start).Seconds()}
	}
}

// writeHeap writes the heap profile to name; gc first brings it up to
// date (it reflects the heap as of the last collection), which a sample
// must not do: a forced collection would lower the very peak it measures.
func (s *Session) writeHeap(name string, gc bool) error {
	if gc {
		runtime.GC()
	}
	path := filepath.Join(s.dir, name)
	if err := atomicfile.WriteFrom(path, func(w io.Writer) error { return pprof.Lookup("heap").WriteTo(w, 0) }, 0o644); err != nil {
		return fmt.Errorf("heap profile %s: %w", path, err)
	}
	return nil
}

// WrapTransport times every request through rt into peak.json's api (a
// rest.Config WrapTransport).
func (s *Session) WrapTransport(rt http.RoundTripper) http.RoundTripper {
	return &timedTransport{next: rt, c: &s.api}
}

// Stop ends the sampling and the CPU profile and writes heap.pprof and
// peak.json. Call it once.
func (s *Session) Stop() error {
	close(s.stop)
	<-s.done
	s.sample()
	pprof.StopCPUProfile()
	var errs []error
	if err := s.cpu.Close(); err != nil {
		errs = append(errs, fmt.Errorf("CPU profile %s: %w", s.cpu.Name(), err))
	}
	if err := s.writeHeap(HeapFile, true); err != nil {
		errs = append(errs, err)
	}
	s.mu.Lock()
	p := s.peaks
	if s.heapErr != nil {
		errs = append(errs, s.heapErr)
	}
	s.mu.Unlock()
	p.Stopped = s.clock.Now()
	p.API = s.api.snapshot()
	js, err := json.MarshalIndent(p, "", "  ")
	if err == nil {
		path := filepath.Join(s.dir, PeakFile)
		if err = atomicfile.Write(path, append(js, '\n'), 0o644); err != nil {
			err = fmt.Errorf("peaks %s: %w", path, err)
		}
	}
	return errors.Join(append(errs, err)...)
}

// ReadPeaks reads a peak.json.
func ReadPeaks(path string) (Peaks, error) {
	var p Peaks
	data, err := os.ReadFile(path)
	if err != nil {
		return p, fmt.Errorf("read the peaks: %w", err)
	}
	if err := json.Unmarshal(data, &p); err != nil {
		return p, fmt.Errorf("peaks %s: %w", path, err)
	}
	return p, nil
}
