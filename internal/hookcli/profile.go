package hookcli

import (
	"fmt"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/clock"

	"github.com/openfuyao/npu-stack/internal/cli"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/profile"
)

// profiled runs fn under the profiles --profile-dir asks for (none when
// dir is empty): the CPU profile and the sampling span the whole run, and
// every API client built from client afterwards has its requests timed.
// A rollout that failed keeps its own error, the profiles' is logged;
// one that succeeded fails when its profiles could not be written, since
// whoever asked for them (make bench) would otherwise read stale ones.
func profiled(dir string, client *kube.ClientOptions, log logrus.FieldLogger, fn func() error) error {
	if dir == "" {
		return fn()
	}
	s, err := profile.Start(dir, profile.Options{Clock: clock.RealClock{}, Interval: profile.DefaultInterval})
	if err != nil {
		return cli.Terminal(fmt.Errorf("--profile-dir: %w", err))
	}
	client.WrapTransport = s.WrapTransport
	err = fn()
	perr := s.Stop()
	switch {
	case perr == nil:
		log.WithField("dir", dir).Info("profiles written")
	case err != nil:
		log.WithError(perr).Warn("cannot write every profile of the rollout")
	default:
		return fmt.Errorf("--profile-dir: %w", perr)
	}
	return err
}
