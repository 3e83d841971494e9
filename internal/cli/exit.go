package cli

import (
	"errors"
	"fmt"
)

// Exit codes shared by the binaries. ExitTerminal tells a Job's
// podFailurePolicy that retrying cannot help (the chart fails the Job on
// it); any other failure may be retried.
const (
	ExitOK       = 0
	ExitError    = 1
	ExitTerminal = 2
)

// ExitCodeError carries the process exit code with the error.
type ExitCodeError struct {
	Code int
	Err  error
}

func (e *ExitCodeError) Error() string { return e.Err.Error() }
func (e *ExitCodeError) Unwrap() error { return e.Err }

// Terminal wraps err as a failure that retrying cannot fix.
func Terminal(err error) error { return &ExitCodeError{Code: ExitTerminal, Err: err} }

// Terminalf is Terminal(fmt.Errorf(...)).
func Terminalf(format string, args ...any) error { return Terminal(fmt.Errorf(format, args...)) }

// ExitCode is the process exit code for err.
func ExitCode(err error) int {
	if err == nil {
		return ExitOK
	}
	var ec *ExitCodeError
	if errors.As(err, &ec) {
		return ec.Code
	}
	return ExitError
}
