package marker

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadyWedgeAndChips(t *testing.T) {
	d := Dir{Path: filepath.Join(t.TempDir(), "run", "npu-stack")}
	if _, ok, err := d.Ready(); ok || err != nil {
		t.Fatalf("fresh dir: ready=%v err=%v", ok, err)
	}
	if err := d.SetReady("25.3.0"); err != nil {
		t.Fatal(err)
	}
	v, ok, err := d.Ready()
	if !ok || err != nil || v != "25.3.0" {
		t.Fatalf("Ready = %q, %v, %v", v, ok, err)
	}
	if st, _ := os.Stat(d.ReadyFile()); st.Mode().Perm() != 0o644 {
		t.Fatalf("marker mode %v", st.Mode().Perm())
	}
	if err := d.ClearReady(); err != nil {
		t.Fatal(err)
	}
	if err := d.ClearReady(); err != nil {
		t.Fatalf("second clear: %v", err)
	}
	if w, _ := d.Wedged(); w {
		t.Fatal("wedged without record")
	}
	_ = d.RecordWedge("chip 3 Critical")
	if w, _ := d.Wedged(); !w {
		t.Fatal("wedge record lost")
	}
	_ = d.ClearWedge()
	if w, _ := d.Wedged(); w {
		t.Fatal("wedge record not cleared")
	}
	if _, ok, _ := d.ChipsAtLoad(); ok {
		t.Fatal("chip count without record")
	}
	_ = d.SetChipsAtLoad(8)
	if n, ok, err := d.ChipsAtLoad(); n != 8 || !ok || err != nil {
		t.Fatalf("ChipsAtLoad = %d, %v, %v", n, ok, err)
	}
	_ = os.WriteFile(filepath.Join(d.Path, chipsFile), []byte("eight"), 0o644)
	if _, _, err := d.ChipsAtLoad(); err == nil {
		t.Fatal("garbage chip count accepted")
	}
}

func TestChangesSignalsMarker(t *testing.T) {
	d := Dir{Path: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := d.Changes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SetReady("1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-ctx.Done():
		t.Fatal("no change signalled")
	}
	if _, err := (Dir{Path: filepath.Join(d.Path, "missing")}).Changes(ctx); err == nil {
		t.Fatal("watching a missing directory succeeded")
	}
}
