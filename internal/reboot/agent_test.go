package reboot

import (
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/openfuyao/npu-stack/internal/contract"
)

func TestSlimFleetNodeKeepsWhatTheStormProtectionCounts(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	a := &Agent{keys: keys}
	full := &metav1.PartialObjectMetadata{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "npu-7", UID: "u-7", ResourceVersion: "42",
			Labels:        map[string]string{keys.RebootRequired(): contract.True, contract.LabelNPUPresent: "true", "kubernetes.io/hostname": "npu-7"},
			Annotations:   map[string]string{keys.RebootReason(): string(contract.ReasonRecovery), "node.alpha.kubernetes.io/ttl": "0"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}, {Manager: "npu-hooks"}},
		},
	}
	got, err := a.slimFleetNode(full)
	if err != nil {
		t.Fatal(err)
	}
	want := &metav1.PartialObjectMetadata{
		TypeMeta: full.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: "npu-7", UID: "u-7", ResourceVersion: "42",
			Labels:      map[string]string{keys.RebootRequired(): contract.True},
			Annotations: map[string]string{keys.RebootReason(): string(contract.ReasonRecovery)},
		},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("slim node %+v, want %+v", got, want)
	}
	// The informer may transform an object twice.
	if again, _ := a.slimFleetNode(got); !reflect.DeepEqual(again, want) {
		t.Fatalf("transformed twice: %+v", again)
	}
	healthy, _ := a.slimFleetNode(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "npu-8", Labels: map[string]string{"a": "b"}}})
	if m := healthy.(*metav1.PartialObjectMetadata); m.Labels != nil || m.Annotations != nil {
		t.Fatalf("healthy node kept %v %v", m.Labels, m.Annotations)
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "npu-9", Obj: full}
	if got, _ := a.slimFleetNode(tomb); !reflect.DeepEqual(got, tomb) {
		t.Fatalf("tombstone changed: %+v", got)
	}
}

func TestSameFleetNodeIgnoresWhatIsNotCounted(t *testing.T) {
	keys := contract.Keys{Domain: contract.DefaultDomain}
	a := &Agent{keys: keys}
	slim := func(rv string, labels, annotations map[string]string) any {
		o, _ := a.slimFleetNode(&metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv, Labels: labels, Annotations: annotations}})
		return o
	}
	heartbeat := map[string]string{"other": "1"}
	if !sameFleetNode(slim("1", heartbeat, nil), slim("2", map[string]string{"other": "2"}, heartbeat)) {
		t.Error("a change of keys the storm protection does not read woke the agent")
	}
	wedged := map[string]string{keys.RebootRequired(): contract.True}
	if sameFleetNode(slim("1", nil, nil), slim("2", wedged, nil)) {
		t.Error("a node asking for a reboot did not wake the agent")
	}
	if sameFleetNode(slim("1", wedged, nil), slim("2", wedged, map[string]string{keys.RebootReason(): string(contract.ReasonRecovery)})) {
		t.Error("a new reboot reason did not wake the agent")
	}
	if sameFleetNode(cache.DeletedFinalStateUnknown{}, slim("1", nil, nil)) {
		t.Error("a tombstone compared equal")
	}
}
