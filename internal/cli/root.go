// Package cli holds what every npu-stack command line shares: the root
// command with --version, and the logging flags.
package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	"github.com/openfuyao/npu-stack/internal/buildinfo"
)

// LogFormat names how log lines are written.
type LogFormat string

const (
	LogFormatText LogFormat = "text"
	LogFormatJSON LogFormat = "json"
)

// GlobalOptions are the flags every binary accepts.
type GlobalOptions struct {
	LogLevel  string
	LogFormat string
}

// NewRoot returns a root command named name that prints the build version
// with --version and registers the logging flags into opts.
func NewRoot(name, short string, opts *GlobalOptions) *cobra.Command {
	root := &cobra.Command{
		Use:           name,
		Short:         short,
		Version:       buildinfo.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// cobra's default version line is "<name> version <Version>". No
	// SetVersionTemplate: a template makes text/template's MethodByName
	// reachable, and the linker then keeps every exported method of every
	// type in the binary (all of client-go's typed clients, informers and
	// apply configurations: twice the code, and the node agents' RSS).
	root.PersistentFlags().StringVar(&opts.LogLevel, "log-level", "info", "log level: panic, fatal, error, warn, info, debug or trace")
	root.PersistentFlags().StringVar(&opts.LogFormat, "log-format", string(LogFormatText), "log format: text or json")
	return root
}

// Logger builds the logger the flags ask for, writing to out.
func (o *GlobalOptions) Logger(out io.Writer) (*logrus.Logger, error) {
	level, err := logrus.ParseLevel(o.LogLevel)
	if err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", o.LogLevel, err)
	}
	log := logrus.New()
	log.SetOutput(out)
	log.SetLevel(level)
	switch LogFormat(strings.ToLower(o.LogFormat)) {
	case LogFormatText:
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	case LogFormatJSON:
		log.SetFormatter(&logrus.JSONFormatter{})
	default:
		return nil, fmt.Errorf("--log-format %q: must be %q or %q", o.LogFormat, LogFormatText, LogFormatJSON)
	}
	return log, nil
}
