package healthwatch

import (
	"context"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/kube"
	"github.com/openfuyao/npu-stack/internal/uninstall"
)

// leaveHostTimeout bounds the host cleanup of a stopping driver pod: two
// API calls and a few removals, well within the pod's grace period.
const leaveHostTimeout = 30 * time.Second

// leaver removes npu-stack's files from the host when npu-hooks uninstall
// stopped this driver pod (uninstall.CleanupRequest on its DaemonSet);
// any other stop leaves them, for the pods that come next.
type leaver struct {
	client    kubernetes.Interface
	rec       *kube.Recorder
	log       logrus.FieldLogger
	keys      contract.Keys
	host      host.Host
	namespace string
	// daemonSet is this pod's DaemonSet (--daemonset); empty: no cleanup.
	daemonSet string
	node      string
	files     uninstall.HostFiles
}

// leaveFlags are driver-entry's host cleanup flags.
type leaveFlags struct {
	daemonSet string
	cdiSpecs  []string
}

func (f *leaveFlags) add(fs *pflag.FlagSet) {
	fs.StringVar(&f.daemonSet, "daemonset", "", "this pod's DaemonSet in its namespace (env POD_NAMESPACE): stopped while npu-hooks uninstall deletes it, the pod removes npu-stack's files from the host (--cdi-spec, --marker-dir, "+host.StateDir+"); empty: never")
	fs.StringArrayVar(&f.cdiSpecs, "cdi-spec", nil, "host path of a CDI spec file the chart's device plugin writes, removed with the other host files at uninstall (repeatable)")
}

// leaver is the cleanup of the driver pod of node, whose marker directory
// is markerDir (a host path).
func (f leaveFlags) leaver(client kubernetes.Interface, rec *kube.Recorder, log logrus.FieldLogger, k contract.Keys, h host.Host, namespace, node, markerDir string) leaver {
	return leaver{client: client, rec: rec, log: log, keys: k, host: h, namespace: namespace, daemonSet: f.daemonSet, node: node,
		files: uninstall.HostFiles{CDISpecs: f.cdiSpecs, MarkerDir: markerDir, StateDir: host.StateDir}}
}

// leave runs once the entry gate has returned on SIGTERM (stopped ends
// when the kubelet stops the container), on a context of its own: the
// command's has ended.
func (l leaver) leave(stopped context.Context) {
	if l.daemonSet == "" || stopped.Err() == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(stopped), leaveHostTimeout)
	defer cancel()
	log := l.log.WithField("daemonset", l.namespace+"/"+l.daemonSet)
	ds, err := l.client.AppsV1().DaemonSets(l.namespace).Get(ctx, l.daemonSet, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		ds = nil
	case err != nil:
		log.WithError(err).Warn("cannot read this pod's DaemonSet: npu-stack's host files stay")
		return
	}
	req, ok := uninstall.CleanupRequest(l.keys, ds)
	if !ok {
		log.Debug("stopped, not by npu-hooks uninstall: npu-stack's host files stay")
		return
	}
	removed, err := uninstall.RemoveHostFiles(l.host.Path("/"), l.files.Paths())
	what := "none of them was there"
	if len(removed) > 0 {
		what = strings.Join(removed, ", ")
	}
	if err != nil {
		log.WithError(err).WithField("removed", removed).Warn("npu-hooks uninstall: could not remove all of npu-stack's host files")
		l.event(ctx, true, uninstall.HostFilesMessage(req, "could not remove all of npu-stack's files from the host ("+err.Error()+"); removed: "+what+"; remove the rest by hand"))
		return
	}
	log.WithField("removed", removed).Info("npu-hooks uninstall: npu-stack's host files removed; the installed driver stays")
	l.event(ctx, false, uninstall.HostFilesMessage(req, "removed npu-stack's files from the host: "+what+" (the installed driver stays)"))
}

func (l leaver) event(ctx context.Context, warning bool, msg string) {
	if err := l.rec.NodeByName(ctx, l.client, l.node, warning, contract.EventHostFilesRemoved, "%s", msg); err != nil {
		l.log.WithError(err).Warn("cannot record the host cleanup on the node")
	}
}
