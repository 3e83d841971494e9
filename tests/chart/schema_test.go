package chart_test

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
)

// Every file in testdata/invalid must be refused at render time by the
// schema, with an error naming the field given in its "# want:" line.
func TestInvalidValuesAreRejectedNamingTheField(t *testing.T) {
	files, err := filepath.Glob("testdata/invalid/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 15 {
		t.Fatalf("only %d invalid values files, want at least 15", len(files))
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".yaml"), func(t *testing.T) {
			want := wantLine(t, f)
			vals, err := chartutil.ReadValuesFile(f)
			if err != nil {
				t.Fatalf("read %s: %v", f, err)
			}
			_, err = render(t, vals, renderOpts{})
			if err == nil {
				t.Fatalf("%s rendered; want it rejected naming %q", f, want)
			}
			msg := err.Error()
			if !strings.Contains(msg, "values don't meet the specifications of the schema") {
				t.Fatalf("%s was not rejected by values.schema.json: %v", f, err)
			}
			if !strings.Contains(msg, want) {
				t.Fatalf("error for %s does not name %q:\n%s", f, want, msg)
			}
		})
	}
}

func wantLine(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if w, ok := strings.CutPrefix(sc.Text(), "# want: "); ok {
			return strings.TrimSpace(w)
		}
	}
	t.Fatalf("%s has no '# want: <field>' line", path)
	return ""
}

// Every key of values.yaml is documented in the chart README with its default.
func TestReadmeDocumentsEveryValue(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(filepath.Join("..", "..", "charts", "npu-stack", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "charts", "npu-stack", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var walk func(prefix string, v map[string]any)
	walk = func(prefix string, v map[string]any) {
		for k, x := range v {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			if sub, ok := x.(map[string]any); ok && strings.Contains(string(readme), "`"+key+".") {
				walk(key, sub)
				continue
			}
			if !strings.Contains(string(readme), "| `"+key+"` |") {
				t.Errorf("value %s is not documented in charts/npu-stack/README.md", key)
			}
		}
	}
	walk("", vals)
}

// The chart README is read on its own (helm show readme): the default it
// gives each value is values.yaml's, written as JSON. A default cut short
// with "…" is not compared.
func TestReadmeDefaultsAreTheValues(t *testing.T) {
	vals, err := chartutil.ReadValuesFile(filepath.Join("..", "..", "charts", "npu-stack", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "charts", "npu-stack", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| `([^`]+)` \\| `(.*?)`[^|]* \\|").FindAllStringSubmatch(string(readme), -1)
	if len(rows) < 100 {
		t.Fatalf("only %d value rows in charts/npu-stack/README.md", len(rows))
	}
	for _, r := range rows {
		key, def := r[1], r[2]
		if strings.Contains(def, "…") {
			continue
		}
		want, err := vals.PathValue(key)
		if err != nil {
			// a map value (PathValue reads leaves only)
			m, merr := vals.Table(key)
			if merr != nil {
				t.Errorf("charts/npu-stack/README.md documents %s, which values.yaml does not have", key)
				continue
			}
			want = map[string]any(m)
		}
		var got any
		if err := json.Unmarshal([]byte(def), &got); err != nil {
			t.Errorf("charts/npu-stack/README.md: the default of %s is not JSON: %s", key, def)
			continue
		}
		wj, _ := json.Marshal(want)
		var w any
		_ = json.Unmarshal(wj, &w)
		if !reflect.DeepEqual(got, w) {
			t.Errorf("charts/npu-stack/README.md gives %s the default %s; values.yaml has %s", key, def, wj)
		}
	}
}
