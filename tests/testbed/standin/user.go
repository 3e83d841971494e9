package standin

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// DriverUser is the driver's default user and group; the installer does
// not create them and fails without them (hicann/driver v8.5.0
// env_check.sh checkUserAndGroup(); docs/host-contract.md section 2).
const DriverUser = "HwHiAiUser"

// AddDriverUser adds DriverUser and its group to a machine's /etc/passwd
// and /etc/group (path maps the machine's paths to the host), with the
// first ID from 1000 free in both, as an admin does before installing the
// driver. It does nothing when the user exists.
func AddDriverUser(path func(string) string) error {
	passwd, err := os.ReadFile(path("/etc/passwd"))
	if err != nil {
		return fmt.Errorf("add %s: %w", DriverUser, err)
	}
	group, err := os.ReadFile(path("/etc/group"))
	if err != nil {
		return fmt.Errorf("add %s: %w", DriverUser, err)
	}
	if bytes.HasPrefix(passwd, []byte(DriverUser+":")) || bytes.Contains(passwd, []byte("\n"+DriverUser+":")) {
		return nil
	}
	used := map[int]bool{}
	for _, b := range [][]byte{passwd, group} {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if f := strings.Split(sc.Text(), ":"); len(f) > 2 {
				if id, err := strconv.Atoi(f[2]); err == nil {
					used[id] = true
				}
			}
		}
	}
	id := 1000
	for used[id] {
		id++
	}
	add := func(file string, old []byte, line string) error {
		if len(old) > 0 && old[len(old)-1] != '\n' {
			line = "\n" + line
		}
		f, err := os.OpenFile(path(file), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return fmt.Errorf("add %s: %w", DriverUser, err)
		}
		defer func() { _ = f.Close() }()
		if _, err := f.WriteString(line); err != nil {
			return fmt.Errorf("add %s to %s: %w", DriverUser, file, err)
		}
		return nil
	}
	if err := add("/etc/group", group, fmt.Sprintf("%s:x:%d:\n", DriverUser, id)); err != nil {
		return err
	}
	return add("/etc/passwd", passwd, fmt.Sprintf("%s:x:%d:%d::/home/%s:/usr/sbin/nologin\n", DriverUser, id, id, DriverUser))
}
