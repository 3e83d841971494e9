// Package atomicfile writes files so that a reader sees either the old
// content or the new one, never a partial file: the marker, CDI spec and
// copied binary are read by other processes (the container runtime, the
// device plugin's gate) at any moment.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write replaces path with data and mode.
func Write(path string, data []byte, mode os.FileMode) error {
	return WriteFrom(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, mode)
}

// WriteVerified replaces path with data and mode once verify accepts the
// temporary file, so that a reader never sees content that fails it.
func WriteVerified(path string, data []byte, mode os.FileMode, verify func(tmpPath string) error) error {
	return write(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	}, mode, verify)
}

// WriteFrom replaces path with what fill writes, and mode. The temporary
// file lives next to path so the final rename never crosses filesystems.
func WriteFrom(path string, fill func(io.Writer) error, mode os.FileMode) error {
	return write(path, fill, mode, nil)
}

func write(path string, fill func(io.Writer) error, mode os.FileMode, verify func(string) error) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.Remove(tmp.Name())
		}
	}()
	werr := fill(tmp)
	// CreateTemp makes 0600 files; the umask must not decide the mode
	// readers depend on, so set it explicitly.
	cherr := tmp.Chmod(mode)
	serr := tmp.Sync()
	cerr := tmp.Close()
	if err := errors.Join(werr, cherr, serr, cerr); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if verify != nil {
		if err := verify(tmp.Name()); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	return nil
}

// Copy replaces dst with the content of src and mode.
func Copy(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy %s to %s: %w", src, dst, err)
	}
	defer func() { _ = in.Close() }()
	return WriteFrom(dst, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	}, mode)
}
