// Package imagefs tells what a container image's file system holds at a
// few paths without pulling it: it streams the image's layers, top layer
// first, through go-containerregistry's mutate.Extract (which applies
// whiteouts and opaque directories as a runtime's overlay does: a later
// layer can delete a file of an earlier one), looks only at the tar
// headers, reads nothing but the small files asked for (bounded), keeps
// no layer in memory or on disk, and stops as soon as every path is
// decided, so a package in the top layer costs the bytes up to its header.
package imagefs

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// Probe asks about one path of the image.
type Probe struct {
	// Path is absolute. A Path ending in "/" asks for a directory that
	// holds a regular file whose name matches Match (path.Match syntax).
	Path  string
	Match string
	// Read > 0 reads up to Read bytes of the file, a regular file.
	Read int64
}

// Dir reports whether p asks for a directory.
func (p Probe) Dir() bool { return strings.HasSuffix(p.Path, "/") }

// Answer is what the image holds at a probe's path.
type Answer struct {
	Probe
	// Found: something is there (Type says what); for a directory probe,
	// a matching file (Child) is in it.
	Found bool
	// Type is the tar type flag of what is there, after symbolic links
	// and hard links are followed.
	Type byte
	Size int64
	// Resolved is the path after following links; "" when there was none.
	Resolved string
	// Child is the matching file of a directory probe.
	Child string
	// Data is up to Read bytes of the file; Truncated when it is longer.
	Data      []byte
	Truncated bool
	// Why says why nothing usable was found.
	Why string
}

// maxLinks bounds the links followed for one path (the kernel's ELOOP
// limit is 40; an image needing more than a few is broken anyway).
const maxLinks = 8

// Look answers probes over img's flattened file system. A probe whose
// path (or a parent) is a link is looked up again at the link's target,
// in another pass over the layers: links are rare in the paths asked for.
func Look(ctx context.Context, img v1.Image, probes []Probe) ([]Answer, error) {
	qs := make([]*query, len(probes))
	for i, p := range probes {
		if !path.IsAbs(p.Path) {
			return nil, fmt.Errorf("image path %q is not absolute", p.Path)
		}
		qs[i] = &query{ans: Answer{Probe: p}, cur: rel(p.Path), dir: p.Dir()}
	}
	for hops := 0; ; hops++ {
		var todo []*query
		for _, q := range qs {
			if !q.done || q.link != "" {
				todo = append(todo, q)
			}
		}
		if len(todo) == 0 {
			break
		}
		if hops > maxLinks {
			for _, q := range todo {
				q.ans.Found, q.ans.Why = false, fmt.Sprintf("more than %d links to follow from %s", maxLinks, q.ans.Path)
				q.link, q.done = "", true
			}
			break
		}
		for _, q := range todo {
			if q.link != "" {
				q.cur, q.link, q.done, q.dirSeen = q.link, "", false, false
				q.ans.Resolved = "/" + q.cur
			}
		}
		if err := pass(ctx, img, todo); err != nil {
			return nil, err
		}
	}
	out := make([]Answer, len(qs))
	for i, q := range qs {
		out[i] = q.ans
	}
	return out, nil
}

// query is one probe's state: the path looked up now (relative to the
// image root, as tar names are), and what was seen of it.
type query struct {
	ans     Answer
	cur     string
	dir     bool
	dirSeen bool
	done    bool
	// link is the path to look up next (a link was found).
	link string
}

// pass streams the image's flattened file system once, until every query
// is decided or the layers end.
func pass(ctx context.Context, img v1.Image, qs []*query) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }() // stops the extraction early
	tr := tar.NewReader(rc)
	open := len(qs)
	for open > 0 {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// mutate.Extract ends its tar stream before it reports a
			// layer it failed to read (the tar writer's trailer is
			// written first): the error comes after the end.
			if _, err = io.Copy(io.Discard, rc); err == nil {
				break
			}
		}
		if err != nil {
			if cerr := ctx.Err(); cerr != nil {
				return fmt.Errorf("read the image's layers: %w (%w)", cerr, err)
			}
			return fmt.Errorf("read the image's layers: %w", err)
		}
		name := rel(h.Name)
		var want int64 // the most any query reads of this entry
		for _, q := range qs {
			if !q.done && q.read(h, name) {
				want = max(want, q.ans.Read)
			}
		}
		var data []byte
		truncated := false
		if want > 0 {
			if data, truncated, err = readAtMost(tr, want); err != nil {
				return fmt.Errorf("read /%s in the image: %w", name, err)
			}
		}
		for _, q := range qs {
			if q.done {
				continue
			}
			d, cut := data, truncated
			if !q.read(h, name) {
				d, cut = nil, false
			} else if int64(len(d)) > q.ans.Read {
				d, cut = d[:q.ans.Read], true
			}
			if q.see(h, name, d, cut) {
				open--
			}
		}
	}
	for _, q := range qs {
		if q.done {
			continue
		}
		q.done = true
		switch {
		case q.dir && q.dirSeen:
			q.ans.Why = fmt.Sprintf("/%s holds no file matching %s", q.cur, q.ans.Match)
		default:
			q.ans.Why = fmt.Sprintf("/%s is not in the image (no layer adds it, or a later layer deletes it)", q.cur)
		}
	}
	return nil
}

// read reports whether h is the file q wants the contents of.
func (q *query) read(h *tar.Header, name string) bool {
	return !q.dir && q.ans.Read > 0 && name == q.cur && h.Typeflag == tar.TypeReg
}

// see applies one entry of the flattened file system to q and reports
// whether it decided q.
func (q *query) see(h *tar.Header, name string, data []byte, truncated bool) bool {
	switch {
	case name == q.cur:
		return q.seeSelf(h, name, data, truncated)
	case strings.HasPrefix(q.cur, name+"/"):
		// A parent: a directory changes nothing; anything else replaces
		// the directory, and everything under it in lower layers.
		switch h.Typeflag {
		case tar.TypeDir:
			return false
		case tar.TypeSymlink:
			q.link = path.Join(linkTarget(name, h.Linkname), strings.TrimPrefix(q.cur, name+"/"))
		default:
			q.ans.Why = fmt.Sprintf("/%s is a file in the image, not a directory", name)
		}
		q.done = true
		return true
	case q.dir && strings.HasPrefix(name, q.cur+"/"):
		// Something in the directory: it exists, even in a layer that
		// has no entry of its own for it.
		q.dirSeen = true
		if path.Dir(name) != q.cur || h.Typeflag != tar.TypeReg && h.Typeflag != tar.TypeLink {
			return false
		}
		if ok, _ := path.Match(q.ans.Match, path.Base(name)); !ok {
			return false
		}
		q.ans.Found, q.ans.Type, q.ans.Child, q.done = true, tar.TypeDir, "/"+name, true
		return true
	}
	return false
}

func (q *query) seeSelf(h *tar.Header, name string, data []byte, truncated bool) bool {
	switch h.Typeflag {
	case tar.TypeSymlink:
		q.link = linkTarget(name, h.Linkname)
	case tar.TypeLink:
		// A hard link names its target from the image root.
		q.link = rel(h.Linkname)
	case tar.TypeDir:
		if q.dir {
			q.dirSeen = true
			return false // decided by a matching file in it, or the end
		}
		q.ans.Found, q.ans.Type = true, tar.TypeDir
	default:
		if q.dir {
			q.ans.Why = fmt.Sprintf("/%s is a file in the image, not a directory", name)
			break
		}
		q.ans.Found, q.ans.Type, q.ans.Size = true, h.Typeflag, h.Size
		q.ans.Data, q.ans.Truncated = data, truncated
	}
	q.done = true
	return true
}

// linkTarget is where the symbolic link at name points, relative to the
// image root (an absolute target is taken from the image root, as inside
// the container; ".." never leaves it).
func linkTarget(name, target string) string {
	if path.IsAbs(target) {
		return rel(target)
	}
	return rel(path.Join("/", path.Dir(name), target))
}

// rel is p relative to the image root, as layer tar names are.
func rel(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// readAtMost reads up to n bytes of r and reports whether more remained.
func readAtMost(r io.Reader, n int64) ([]byte, bool, error) {
	b, err := io.ReadAll(io.LimitReader(r, n+1))
	if err != nil {
		return nil, false, err
	}
	if int64(len(b)) > n {
		return b[:n], true, nil
	}
	return b, false, nil
}
