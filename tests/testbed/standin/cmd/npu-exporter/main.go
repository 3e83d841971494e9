// Command npu-exporter is the test bed's stand-in for the MindCluster
// v7.3.0 npu-exporter (/usr/local/bin/npu-exporter in npu-exporter:v7.3.0,
// run by the image's CMD). It takes upstream's flags
// (component/npu-exporter/main.go), logs to -logFile, and serves
// npu_chip_info_health_status per chip on -ip:-port /metrics, in the
// label set of upstream's collector (collector/testdata/
// prometheus_metrics): 1 when dcmi's health code is 0 (OK), 0 otherwise
// (collector/metrics/collector_for_npu.go getHealth, getHealthCode). The chips come
// through the driver's libdcmi.so (dcmi-query), so without the driver's
// libraries it serves no chips and says why in its log.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed/standin/deviceplugin"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "npu-exporter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("npu-exporter", flag.ContinueOnError)
	port := fs.Int("port", 8082, "listen port")
	ip := fs.String("ip", "", "listen address")
	logFile := fs.String("logFile", "/var/log/mindx-dl/npu-exporter/npu-exporter.log", "log file")
	fs.Int("updateTime", 5, "upstream flag")
	fs.Int("logLevel", 0, "upstream flag")
	fs.String("containerMode", "docker", "upstream flag")
	fs.String("endpoint", "", "upstream flag")
	fs.String("platform", "Prometheus", "upstream flag")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *ip == "" {
		return fmt.Errorf("the parameter ip is required")
	}
	if err := os.MkdirAll(filepath.Dir(*logFile), 0o750); err != nil {
		return fmt.Errorf("log directory: %w", err)
	}
	f, err := os.OpenFile(*logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("log file: %w", err)
	}
	defer func() { _ = f.Close() }()
	logger := log.New(io.MultiWriter(os.Stderr, f), "", log.LstdFlags)
	// The chips' device nodes stay open while the exporter runs, as the
	// vendor's does through DCMI (deviceplugin.Held): from the start when
	// the driver is loaded then, else from the first scrape that finds
	// the chips.
	held := deviceplugin.NewHeld("/dev")
	defer func() { _ = held.Close() }()
	query := func(ctx context.Context) []deviceplugin.Chip {
		chips, err := deviceplugin.Query(ctx, "/usr/local/bin/dcmi-query")
		if err == nil {
			err = held.Hold(chips)
		}
		if err != nil {
			logger.Printf("%v", err)
		}
		return chips
	}
	query(context.Background())
	http.HandleFunc("/metrics", func(w http.ResponseWriter, r *http.Request) {
		chips := query(r.Context())
		var b strings.Builder
		b.WriteString("# HELP npu_chip_info_health_status the npu health status\n# TYPE npu_chip_info_health_status gauge\n")
		for _, c := range chips {
			v := 0
			if c.Health == 0 {
				v = 1
			}
			fmt.Fprintf(&b, "npu_chip_info_health_status{container_name=\"\",id=\"%d\",model_name=%q,namespace=\"\",pcie_bus_info=\"\",pod_name=\"\",vdie_id=\"\"} %d\n", c.LogicID, c.Name, v)
		}
		_, _ = io.WriteString(w, b.String())
	})
	l, err := net.Listen("tcp", net.JoinHostPort(*ip, strconv.Itoa(*port)))
	if err != nil {
		return err
	}
	logger.Printf("serving metrics on %s", l.Addr())
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return context.Background() }}
	return srv.Serve(l)
}
