package drivertree

import (
	"bufio"
	"bytes"
	"errors"
	"strings"
)

// ParseVersionInfo returns the value of the Version= line of a
// version.info. The file is line-oriented key=value whose first line is
// Version=<version> (hicann/driver v8.5.0,
// scripts/package/common/py/version_info.py VersionInfoFile._get_content);
// upstream reads it with awk -F '=' '$1=="Version" {print $2}'
// (args_parse.sh getVersionInstalled) and accepts a lower-case key in its
// upgrade check (run_driver_upgrade_check.sh l.359, /^[Vv]ersion=/).
func ParseVersionInfo(b []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		key, val, ok := strings.Cut(strings.TrimSpace(sc.Text()), "=")
		if !ok || (key != "Version" && key != "version") {
			continue
		}
		if val = strings.TrimSpace(val); val == "" {
			return "", errors.New("its Version= line is empty")
		}
		return val, nil
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("it has no Version=<version> line")
}
