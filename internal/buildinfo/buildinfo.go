// Package buildinfo carries the version stamped into every npu-stack binary.
package buildinfo

// Version is overwritten at link time by the Makefile
// (-X github.com/openfuyao/npu-stack/internal/buildinfo.Version=...). It is
// the only link-time variable; nothing writes it at run time.
var Version = "dev"
