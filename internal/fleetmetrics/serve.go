package fleetmetrics

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Server serves the fleet series on /metrics and readiness on /readyz
// (200 once the watches have synced).
type Server struct {
	Addr      string
	Collector *Collector
	Ready     func() bool
}

// Run listens on Addr and serves until ctx ends; the listener's address
// is sent on bound (for a :0 port) once it listens.
func (s Server) Run(ctx context.Context, bound func(net.Addr)) error {
	reg := prometheus.NewRegistry()
	if err := reg.Register(s.Collector); err != nil {
		return fmt.Errorf("fleet exporter: register the fleet collector: %w", err)
	}
	if err := reg.Register(collectors.NewGoCollector()); err != nil {
		return fmt.Errorf("fleet exporter: register the Go collector: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if s.Ready != nil && !s.Ready() {
			http.Error(w, "watches not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	lis, err := (&net.ListenConfig{}).Listen(ctx, "tcp", s.Addr)
	if err != nil {
		return fmt.Errorf("fleet exporter: listen on %s (change --metrics-addr, the chart's fleetExporter.port): %w", s.Addr, err)
	}
	if bound != nil {
		bound(lis.Addr())
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(lis) }()
	select {
	case err := <-done:
		return fmt.Errorf("fleet exporter: serve on %s: %w", s.Addr, err)
	case <-ctx.Done():
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("fleet exporter: shut down: %w", err)
	}
	return nil
}
