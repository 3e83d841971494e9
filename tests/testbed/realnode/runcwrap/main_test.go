//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/openfuyao/npu-stack/tests/testbed/realnode/nodepaths"
)

// containerd's shim runs runc with global options before the command
// (go-runc: --root, --log, --log-format) and the bundle as --bundle.
func TestCreateBundle(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args   []string
		bundle string
		ok     bool
	}{
		{strings.Fields("--root /run/containerd/runc/k8s.io --log /b/log.json --log-format json create --bundle /b --pid-file /b/init.pid abc"), "/b", true},
		{strings.Fields("--root /r create -b /b2 abc"), "/b2", true},
		{strings.Fields("--debug create --bundle=/b3 abc"), "/b3", true},
		{strings.Fields("run abc"), wd, true},
		{strings.Fields("--root /r start abc"), "", false},
		// "create" as a global option's value is not the command.
		{strings.Fields("--root create state abc"), "", false},
		{strings.Fields("--root /r exec --process /p.json abc"), "", false},
		{nil, "", false},
	} {
		bundle, ok := createBundle(c.args)
		if bundle != c.bundle || ok != c.ok {
			t.Errorf("createBundle(%q) = %q, %v; want %q, %v", c.args, bundle, ok, c.bundle, c.ok)
		}
	}
}

// The hook is appended to the createContainer hooks; every other field,
// large numbers included, is kept as it was.
func TestAddHook(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	in := `{"ociVersion":"1.2.1","root":{"path":"rootfs"},"linux":{"resources":{"memory":{"limit":9223372036854771712}}},` +
		`"hooks":{"createContainer":[{"path":"/other"}]}}`
	if err := os.WriteFile(p, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := addHook(p); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"hooks":{"createContainer":[{"path":"/other"},{"args":["runcwrap","` + nodepaths.BootIDHook + `"],"path":"` + nodepaths.RuncWrapper + `"}]},` +
		`"linux":{"resources":{"memory":{"limit":9223372036854771712}}},"ociVersion":"1.2.1","root":{"path":"rootfs"}}`
	if string(b) != want {
		t.Errorf("config.json after addHook:\n%s\nwant\n%s", b, want)
	}
}
