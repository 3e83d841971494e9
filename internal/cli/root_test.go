package cli

import (
	"bytes"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
)

func TestVersionFlag(t *testing.T) {
	var opts GlobalOptions
	root := NewRoot("npu-test", "test", &opts)
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetArgs([]string{"--version"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out.String(), "npu-test version ") {
		t.Fatalf("--version printed %q", out.String())
	}
}

func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	opts := GlobalOptions{LogLevel: "debug", LogFormat: "json"}
	log, err := opts.Logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.WithField("node", "n1").Debug("hello")
	if !strings.Contains(buf.String(), `"node":"n1"`) || log.GetLevel() != logrus.DebugLevel {
		t.Fatalf("json debug log = %q", buf.String())
	}
	for _, bad := range []GlobalOptions{{LogLevel: "loud", LogFormat: "text"}, {LogLevel: "info", LogFormat: "xml"}} {
		if _, err := bad.Logger(&buf); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}
