package testbed

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/cgi"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// GitServer serves bare Git repositories over loopback HTTP with Git's own
// smart-HTTP server, git http-backend (Debian's git), as a Git forge
// would: clones and fetches by any Git client, Argo CD's repo server
// among them. Pushes go straight to the bare repository on disk
// (Repo.Commit).
type GitServer struct {
	dir string
	// URL is http://127.0.0.1:<port>; a repository is URL/<name>.git.
	URL string
	srv *http.Server
}

// StartGitServer serves the bare repositories under dir.
func StartGitServer(dir string) (*GitServer, error) {
	gitBin, err := exec.LookPath("git")
	if err != nil {
		return nil, fmt.Errorf("git server: %w (install Debian's git)", err)
	}
	execPath, err := exec.Command(gitBin, "--exec-path").Output()
	if err != nil {
		return nil, fmt.Errorf("git --exec-path: %w", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("git server: %w", err)
	}
	// GIT_HTTP_EXPORT_ALL: every repository is readable without a
	// git-daemon-export-ok file; pushing over HTTP stays off.
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + dir, "GIT_HTTP_EXPORT_ALL=1"}}
	g := &GitServer{dir: dir, URL: "http://" + ln.Addr().String(), srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	go func() { _ = g.srv.Serve(ln) }()
	return g, nil
}

// Stop ends the server.
func (g *GitServer) Stop() error { return g.srv.Close() }

// GitRepo is a bare repository served by a GitServer with a work tree
// beside it for commits.
type GitRepo struct {
	// URL is the repository's clone URL.
	URL  string
	bare string
	work string
}

// NewRepo creates the bare repository <name>.git with branch main.
func (g *GitServer) NewRepo(name string) (*GitRepo, error) {
	r := &GitRepo{URL: g.URL + "/" + name + ".git", bare: filepath.Join(g.dir, name+".git"), work: filepath.Join(g.dir, "work-"+name)}
	if err := gitRun("", "init", "-q", "--bare", "-b", "main", r.bare); err != nil {
		return nil, err
	}
	if err := gitRun("", "init", "-q", "-b", "main", r.work); err != nil {
		return nil, err
	}
	return r, nil
}

// Commit writes files (path relative to the repository -> content),
// commits them with message and pushes main; it returns the commit's hash.
func (r *GitRepo) Commit(files map[string][]byte, message string) (string, error) {
	for p, data := range files {
		full := filepath.Join(r.work, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return "", fmt.Errorf("commit %s: %w", p, err)
		}
		if err := os.WriteFile(full, data, 0o644); err != nil {
			return "", fmt.Errorf("commit %s: %w", p, err)
		}
	}
	if err := gitRun(r.work, "add", "-A"); err != nil {
		return "", err
	}
	if err := gitRun(r.work, "commit", "-q", "-m", message); err != nil {
		return "", err
	}
	return r.push()
}

// Revert reverts the last commit, as a user undoing a change in Git does,
// and pushes main; it returns the new commit's hash.
func (r *GitRepo) Revert() (string, error) {
	if err := gitRun(r.work, "revert", "--no-edit", "HEAD"); err != nil {
		return "", err
	}
	return r.push()
}

func (r *GitRepo) push() (string, error) {
	if err := gitRun(r.work, "push", "-q", r.bare, "main"); err != nil {
		return "", err
	}
	out, err := exec.Command("git", "-C", r.work, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// gitRun runs git in dir with a fixed identity (no user config needed).
func gitRun(dir string, args ...string) error {
	if dir != "" {
		args = append([]string{"-C", dir}, args...)
	}
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=npu-stack test bed", "GIT_AUTHOR_EMAIL=testbed@localhost",
		"GIT_COMMITTER_NAME=npu-stack test bed", "GIT_COMMITTER_EMAIL=testbed@localhost", "GIT_CONFIG_GLOBAL=/dev/null")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("git %s: exit %d: %s", strings.Join(args, " "), ee.ExitCode(), out.String())
		}
		return fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return nil
}
