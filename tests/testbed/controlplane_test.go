package testbed_test

import (
	"encoding/json"
	"errors"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/openfuyao/npu-stack/tests/testbed"
)

func TestKubectlVersionShowsServer137(t *testing.T) {
	ctx := ctxTimeout(t, time.Minute)
	out, err := exec.CommandContext(ctx, filepath.Join(env.BinDir, "kubectl"), "--kubeconfig", env.Kubeconfig, "version", "-o", "json").Output()
	if err != nil {
		t.Fatalf("kubectl version: %v", err)
	}
	var v struct {
		Client struct{ GitVersion string } `json:"clientVersion"`
		Server struct {
			GitVersion, Major, Minor string
		} `json:"serverVersion"`
	}
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("parse %s: %v", out, err)
	}
	if !strings.HasPrefix(v.Server.GitVersion, "v1.37.") || v.Server.Major != "1" || v.Server.Minor != "37" {
		t.Fatalf("server version %+v, want v1.37.x (major 1, minor 37)", v.Server)
	}
	if !strings.HasPrefix(v.Client.GitVersion, "v1.37.") {
		t.Fatalf("kubectl client version %q, want the v1.37.x we built", v.Client.GitVersion)
	}
}

// A second control plane, stopped, must leave no process, port or file.
func TestControlPlaneStopLeavesNothing(t *testing.T) {
	ctx := ctxTimeout(t, 2*time.Minute)
	cp, err := testbed.Start(ctx, testbed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pids, dir := cp.PIDs(), cp.Dir
	u, err := url.Parse(cp.Host())
	if err != nil {
		t.Fatal(err)
	}
	if len(pids) != 6 {
		t.Fatalf("%d components running, want 6 (etcd, apiserver, controller-manager, scheduler, kwok, registry)", len(pids))
	}
	if err := cp.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("component pid %d still exists after Stop (kill -0: %v)", pid, err)
		}
	}
	if conn, err := net.DialTimeout("tcp", u.Host, time.Second); err == nil {
		_ = conn.Close()
		t.Errorf("API server port %s still accepts connections after Stop", u.Host)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("data dir %s left behind (%v)", dir, err)
	}
	if err := cp.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}
