package rolloutrecord

import (
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/openfuyao/npu-stack/internal/contract"
)

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	r := Record{Name: "npu-stack-rollout-record-25.5.0", Versions: "25.5.0", Dropped: 3, Entries: []Entry{
		{At: t0, Kind: KindState, Node: "npu-0", From: "", To: "upgrade-required"},
		{At: t0.Add(1500 * time.Millisecond), Kind: KindState, Node: "npu-0", From: "upgrade-required", To: "reboot-required"},
		{At: t0.Add(2 * time.Second), Kind: KindApproved, Node: "npu-0"},
		{At: t0.Add(3 * time.Second), Kind: KindRebooting, Node: "npu-0", To: "upgrade"},
		{At: t0.Add(9 * time.Second), Kind: KindBooted, Node: "npu-0"},
		{At: t0.Add(12 * time.Second), Kind: KindState, Node: "npu-0", From: "uncordon-required", To: ""},
		{At: t0.Add(13 * time.Second), Kind: KindOutcome, To: "finished"},
	}}
	got, err := Decode(r.Name, r.Encode())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
	}
	if o := got.Outcome(); o != "finished" {
		t.Errorf("outcome %q, want finished", o)
	}
	if s, ok := got.LastState("npu-0"); !ok || s != "" {
		t.Errorf("last state of npu-0: %q %v, want up to date", s, ok)
	}
}

func TestDecodeRefusesGarbageNamingTheFix(t *testing.T) {
	for _, data := range []map[string]string{
		{KeyEntries: "12 state npu-0\n"},
		{KeyEntries: "x state npu-0 - upgrade-required\n"},
		{KeyEntries: "12 exploded npu-0 - -\n"},
		{KeyDropped: "-1"},
	} {
		if _, err := Decode("r", data); err == nil || !strings.Contains(err.Error(), "rollout record r") {
			t.Errorf("Decode(%v) = %v, want an error naming the record", data, err)
		}
	}
}

func TestAppendKeepsTheNewestWithinTheCap(t *testing.T) {
	var r Record
	for i := range 10 {
		r.Append(4, Entry{At: t0.Add(time.Duration(i) * time.Second), Kind: KindApproved, Node: "n"})
	}
	if len(r.Entries) != 4 || r.Dropped != 6 || !r.Entries[0].At.Equal(t0.Add(6*time.Second)) {
		t.Fatalf("after 10 appends with cap 4: %d entries from %s, %d dropped; want the newest 4, 6 dropped", len(r.Entries), r.Entries[0].At, r.Dropped)
	}
	if len(r.Encode()[KeyEntries]) > 4*64 {
		t.Errorf("4 entries take %d bytes", len(r.Encode()[KeyEntries]))
	}
}

func TestOutcomeIsEmptyWhileALaterRunMoves(t *testing.T) {
	r := Record{Entries: []Entry{
		{At: t0, Kind: KindOutcome, To: "stuck"},
		{At: t0.Add(time.Second), Kind: KindState, Node: "a", From: "upgrade-failed", To: "upgrade-required"},
	}}
	if o := r.Outcome(); o != "" {
		t.Fatalf("outcome %q after a later state change, want running (empty)", o)
	}
}

func node(name, state, approve, rebootFrom, boot string) *corev1.Node {
	k := contract.Keys{Domain: contract.DefaultDomain}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}, Annotations: map[string]string{}}}
	if state != "" {
		n.Labels[k.UpgradeState()] = state
	}
	if approve != "" {
		n.Annotations[k.ApproveReboot()] = approve
	}
	if rebootFrom != "" {
		n.Annotations[k.RebootFromBootID()] = rebootFrom
		n.Annotations[k.RebootStartedReason()] = "upgrade"
	}
	n.Status.NodeInfo.BootID = boot
	return n
}

func TestChanges(t *testing.T) {
	k := contract.Keys{Domain: contract.DefaultDomain}
	for _, tc := range []struct {
		name     string
		old, cur *corev1.Node
		want     []Entry
	}{
		{"nothing", node("a", "drain-required", "", "", "b1"), node("a", "drain-required", "", "", "b1"), nil},
		{"state", node("a", "drain-required", "", "", "b1"), node("a", "reboot-required", "", "", "b1"),
			[]Entry{{At: t0, Kind: KindState, Node: "a", From: "drain-required", To: "reboot-required"}}},
		{"approval", node("a", "reboot-required", "", "", "b1"), node("a", "reboot-required", "true", "", "b1"),
			[]Entry{{At: t0, Kind: KindApproved, Node: "a"}}},
		{"an approval other than true is none", node("a", "reboot-required", "", "", "b1"), node("a", "reboot-required", "yes", "", "b1"), nil},
		{"reboot started, approval consumed", node("a", "reboot-required", "true", "", "b1"), node("a", "reboot-required", "", "b1", "b1"),
			[]Entry{{At: t0, Kind: KindRebooting, Node: "a", To: "upgrade"}}},
		{"new boot", node("a", "reboot-required", "", "b1", "b1"), node("a", "reboot-required", "", "b1", "b2"),
			[]Entry{{At: t0, Kind: KindBooted, Node: "a"}}},
		{"boot ID first reported is no reboot", node("a", "", "", "", ""), node("a", "", "", "", "b1"), nil},
	} {
		if got := Changes(k, tc.old, tc.cur, t0); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

func TestCatchUp(t *testing.T) {
	k := contract.Keys{Domain: contract.DefaultDomain}
	r := Record{Entries: []Entry{{At: t0, Kind: KindState, Node: "a", From: "", To: "drain-required"}}}
	if es := CatchUp(k, r, node("a", "drain-required", "", "", ""), t0); es != nil {
		t.Errorf("unchanged node: %+v", es)
	}
	if es := CatchUp(k, r, node("a", "validation-required", "", "", ""), t0); len(es) != 1 || es[0].From != "drain-required" || es[0].To != "validation-required" {
		t.Errorf("node moved while unwatched: %+v", es)
	}
	if es := CatchUp(k, r, node("b", "", "", "", ""), t0); es != nil {
		t.Errorf("an idle node the record does not name: %+v", es)
	}
	if es := CatchUp(k, r, node("c", "upgrade-required", "", "", ""), t0); len(es) != 1 || es[0].From != "" {
		t.Errorf("a node in a state the record does not name: %+v", es)
	}
}

func TestName(t *testing.T) {
	if got := Name("npu-stack-rollout", []string{"25.5.0", "25.5.0"}); got != "npu-stack-rollout-record-25.5.0" {
		t.Errorf("Name = %q", got)
	}
	if got := Name("npu-stack-rollout", []string{"26.0.RC1", "25.5.0"}); got != "npu-stack-rollout-record-25.5.0-26.0.rc1" {
		t.Errorf("Name = %q", got)
	}
}

func TestPrunableKeepsTheNewest(t *testing.T) {
	cm := func(name string, age int) corev1.ConfigMap {
		return corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(t0.Add(-time.Duration(age) * time.Hour))}}
	}
	items := []corev1.ConfigMap{cm("a", 5), cm("b", 1), cm("cur", 0), cm("c", 3), cm("d", 4)}
	got := Prunable(items, "cur", 3)
	if !reflect.DeepEqual(got, []string{"d", "a"}) {
		t.Fatalf("Prunable = %v, want the two oldest beyond 3 kept", got)
	}
}
