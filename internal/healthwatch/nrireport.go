package healthwatch

import (
	"context"

	"github.com/sirupsen/logrus"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/kube"
)

// nodeReport is the injector's nriinject.Reporter: a Warning event
// NRIUnavailable on the Node and its injection-status annotation, which
// npu-hooks status prints; the annotation goes once the injector
// registers. Failures to write are logged: the injector serves
// containers whether or not the API server hears of it.
type nodeReport struct {
	node   string
	keys   contract.Keys
	nodes  kube.NodeClient
	events *kube.Recorder
	log    logrus.FieldLogger
}

func (r nodeReport) NoNRI(ctx context.Context, why string) {
	n, err := r.nodes.Patch(ctx, r.node, kube.NodeChange{Annotations: map[string]*string{r.keys.InjectionStatus(): kube.Set("unavailable: " + why)}})
	if err != nil {
		r.log.WithError(err).Warn("could not record on the Node that the runtime offers no NRI")
		return
	}
	r.events.Node(n, true, contract.EventNRIUnavailable, "%s; no chip is advertised on this node until the injector registers", why)
}

func (r nodeReport) Registered(ctx context.Context) {
	n, err := r.nodes.Get(ctx, r.node)
	if err != nil {
		r.log.WithError(err).Warn("could not read the Node to clear its injection status")
		return
	}
	if _, ok := n.Annotations[r.keys.InjectionStatus()]; !ok {
		return
	}
	if _, err := r.nodes.Patch(ctx, r.node, kube.NodeChange{Annotations: map[string]*string{r.keys.InjectionStatus(): nil}}); err != nil {
		r.log.WithError(err).Warn("could not clear the Node's injection status")
	}
}
