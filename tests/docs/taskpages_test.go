package docs_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// mdLink is a Markdown link outside code: its target path (empty for the
// same page) and anchor.
var mdLink = regexp.MustCompile(`\]\(([^)\s#]*)(#[^)\s]*)?\)`)

// TestDocLinksResolve: every relative link of README.md, the project's
// top-level pages and docs/*.md names a file that exists, and a heading
// that exists in a Markdown page, so moving a section cannot leave a
// link behind.
func TestDocLinksResolve(t *testing.T) {
	root := repoRoot(t)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"README.md", "CONTRIBUTING.md", "SECURITY.md", "CHANGELOG.md"} {
		pages = append(pages, filepath.Join(root, f))
	}
	checked := 0
	for _, page := range pages {
		rel, _ := filepath.Rel(root, page)
		text := readRepo(t, rel)
		for i, l := range outsideCode(text) {
			for _, m := range mdLink.FindAllStringSubmatch(l, -1) {
				target, anchor := m[1], strings.TrimPrefix(m[2], "#")
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path := page
				if target != "" {
					path = filepath.Join(filepath.Dir(page), target)
				}
				checked++
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d links %s, which does not exist", rel, i+1, m[1])
					continue
				}
				if anchor == "" || !strings.HasSuffix(path, ".md") {
					continue
				}
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(anchors(string(b)), anchor) {
					t.Errorf("%s:%d links %s#%s: no such heading in %s", rel, i+1, m[1], anchor, filepath.Base(path))
				}
			}
		}
	}
	if checked < 50 {
		t.Errorf("only %d relative links found: the link pattern no longer matches the pages", checked)
	}
}

// outsideCode returns the page's lines with those in fenced blocks and
// inline code blanked, numbered as in the file.
func outsideCode(text string) []string {
	code := regexp.MustCompile("`[^`]*`")
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			in = !in
			lines[i] = ""
			continue
		}
		if in {
			lines[i] = ""
			continue
		}
		lines[i] = code.ReplaceAllString(l, "")
	}
	return lines
}

// TestTaskPagesAreNumberedProcedures: every page README's task table
// links is a procedure: a "## Steps" section of numbered steps 1, 2, 3...
// with nothing but the steps' own (indented) text between them.
func TestTaskPagesAreNumberedProcedures(t *testing.T) {
	readme := readRepo(t, "README.md")
	tasks := section(t, readme, "README.md", "Documentation")
	tasks, _, ok := strings.Cut(tasks, "Concepts and reference")
	if !ok {
		t.Fatal(`README.md's Documentation has no "Concepts and reference" after its tasks`)
	}
	links := regexp.MustCompile(`\]\(docs/([a-z-]+\.md)\)`).FindAllStringSubmatch(tasks, -1)
	if len(links) < 7 {
		t.Fatalf("README.md lists %d task pages, want install, first upgrade, recovery, rollback, uninstall, air-gapped and real-hardware install at least", len(links))
	}
	step := regexp.MustCompile(`^(\d+)\. \S`)
	for _, l := range links {
		file := "docs/" + l[1]
		steps := section(t, readRepo(t, file), file, "Steps")
		lines := outsideCodeKeepIndent(steps)
		last := -1
		for i, line := range lines {
			if step.MatchString(line) {
				last = i
			}
		}
		want := 1
		for i, line := range lines {
			switch m := step.FindStringSubmatch(line); {
			case m != nil:
				if n, _ := strconv.Atoi(m[1]); n != want {
					t.Errorf("%s, Steps line %d: step %s where step %d comes next: %s", file, i+1, m[1], want, line)
				}
				want++
			case want == 1 && strings.TrimSpace(line) != "":
				t.Errorf("%s, Steps: text before step 1: %s", file, line)
			case i < last && line != "" && !strings.HasPrefix(line, " "):
				t.Errorf("%s, Steps line %d: between two steps but not part of one (indent it under its step): %s", file, i+1, line)
			}
		}
		if want < 3 {
			t.Errorf("%s has %d steps: a procedure has at least two", file, want-1)
		}
	}
}

// outsideCodeKeepIndent blanks fenced blocks' contents, keeping the
// fences' own indentation visible as a line of spaces.
func outsideCodeKeepIndent(text string) []string {
	lines := strings.Split(text, "\n")
	in := false
	for i, l := range lines {
		fence := strings.HasPrefix(strings.TrimSpace(l), "```")
		if fence {
			in = !in
		}
		if in || fence {
			lines[i] = strings.Repeat(" ", len(l)-len(strings.TrimLeft(l, " ")))
		}
	}
	return lines
}
