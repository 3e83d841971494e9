// npu-apicount is the benchmark's counting proxy in a process of its own:
// the measured process (npu-hooks rollout, or the peer) talks to it
// instead of the API server, and the benchmark reads the counts from its
// control address. Apart from the node simulator, the proxy's CPU is its
// own and neither slows the other.
//
// It prints one JSON line to stdout once it serves: {"proxy": URL,
// "control": URL}. GET <control>/counts returns the counts so far and
// resets them.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/openfuyao/npu-stack/tests/bench/apicount"
)

func main() {
	kubeconfig := flag.String("kubeconfig", "", "the API server and credentials to forward to")
	as := flag.String("as", "", "forward every request as this user, impersonated with the kubeconfig's credentials, so that the API server's metrics tell the measured process apart (empty: as the credentials)")
	flag.Parse()
	if err := run(*kubeconfig, *as); err != nil {
		fmt.Fprintln(os.Stderr, "npu-apicount:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, as string) error {
	if kubeconfig == "" {
		return fmt.Errorf("--kubeconfig is required (the admin kubeconfig of the control plane)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("read %s: %w", kubeconfig, err)
	}
	rc.Impersonate.UserName = as
	p, err := apicount.Start(rc)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("control listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /counts", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(p.Counter.Snapshot())
	})
	srv := &http.Server{Handler: mux}
	go func() { _ = srv.Serve(ln) }()
	if err := json.NewEncoder(os.Stdout).Encode(apicount.Addresses{Proxy: p.URL(), Control: "http://" + ln.Addr().String()}); err != nil {
		return fmt.Errorf("announce the addresses: %w", err)
	}
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	<-stop
	_ = srv.Close()
	return p.Close()
}
