package health

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/openfuyao/npu-stack/internal/contract"
	"github.com/openfuyao/npu-stack/internal/host"
	"github.com/openfuyao/npu-stack/internal/host/simhost"
)

// What the probe makes of npu-smi failing to run at all: a host problem,
// not a chip failure.
func TestEvaluateHostProblems(t *testing.T) {
	loader := "npu-smi: error while loading shared libraries: libdrvdsmi_host.so: cannot open shared object file: No such file or directory\n"
	for _, tc := range []struct {
		name    string
		err     error
		problem bool
		what    string
	}{
		{name: "ProblemError from the host", err: &host.ProblemError{What: "npu-smi not found at /usr/local/sbin/npu-smi", Fix: "install the driver package"}, problem: true, what: "npu-smi not found"},
		{name: "wrapped ProblemError", err: errors.Join(errors.New("probe"), &host.ProblemError{What: "no driver installed on this boot", Fix: "see DriverInstallFailed"}), problem: true, what: "no driver installed"},
		{name: "exit 127: command not found", err: &host.ExitError{Command: "npu-smi info", Code: 127}, problem: true, what: "exit code 127"},
		{name: "loader error", err: &host.ExitError{Command: "npu-smi info", Code: 127, Output: []byte(loader)}, problem: true, what: "libdrvdsmi_host.so"},
		{name: "loader error with another code", err: &host.ExitError{Command: "npu-smi info", Code: 1, Output: []byte(loader)}, problem: true, what: "error while loading shared libraries"},
		{name: "binary missing", err: &fs.PathError{Op: "fork/exec", Path: "/host/usr/local/sbin/npu-smi", Err: fs.ErrNotExist}, problem: true, what: "npu-smi"},
		{name: "driver error is a chip failure", err: &host.ExitError{Command: "npu-smi info", Code: 255, Output: []byte("dcmi module initialize failed. ret is -8005\n")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := Evaluate(nil, tc.err, 0)
			if r.OK {
				t.Fatal("probe passed")
			}
			if (r.Problem != nil) != tc.problem {
				t.Fatalf("problem %+v, want a problem: %v (reason %q)", r.Problem, tc.problem, r.Reason)
			}
			if tc.problem && (!strings.Contains(r.Problem.What, tc.what) || r.Problem.Fix == "" || !strings.Contains(r.Reason, tc.what)) {
				t.Fatalf("problem %+v / reason %q: want What containing %q, a Fix, and the reason naming it", r.Problem, r.Reason, tc.what)
			}
		})
	}
}

// A host problem never counts towards the failure threshold, never wedges
// and never asks for a reboot, whatever state the node is in; it says so
// once per problem, naming the node, what and the fix, and takes
// driver-ready away while the chips cannot be seen.
func TestDecideHostProblem(t *testing.T) {
	policy := Policy{FailureThreshold: 3, RecoveryThreshold: 1}
	problem := Result{Reason: "host problem: npu-smi not found", Problem: &host.ProblemError{What: "npu-smi not found at /usr/local/sbin/npu-smi", Fix: "install the driver package's npu-smi"}}
	healthyNode := NodeView{Name: "n1", DriverReady: contract.True}
	recoveryNode := NodeView{Name: "n1", RebootRequired: true, RebootReason: "recovery", DriverReady: contract.False}
	for _, tc := range []struct {
		name     string
		st       State
		obs      Observation
		want     Actions
		wantFail int
		events   []string
	}{
		{
			name: "driver up, healthy: not ready, reported, not counted",
			obs:  Observation{Probe: problem, Marker: true, Node: healthyNode},
			want: Actions{DriverReady: ptrBool(false)}, events: []string{"NPUHostProblem"},
		},
		{
			name: "one failure short of the threshold: still not counted, no wedge",
			st:   State{Failures: 2}, obs: Observation{Probe: problem, Marker: true, Node: healthyNode}, wantFail: 2,
			want: Actions{DriverReady: ptrBool(false)}, events: []string{"NPUHostProblem"},
		},
		{
			name: "the same problem again: not reported again",
			st:   State{Failures: 2, Problem: problem.Problem.What}, obs: Observation{Probe: problem, Marker: true, Node: NodeView{Name: "n1", DriverReady: contract.False}}, wantFail: 2,
		},
		{
			name: "wedged, recovery pending: nothing withdrawn or asked again, marker state untouched",
			st:   State{Failures: 3}, obs: Observation{Probe: problem, Marker: true, WedgeRecorded: true, Node: recoveryNode}, wantFail: 3,
			events: []string{"NPUHostProblem"},
		},
		{
			name: "wedge recorded, request cleared, at the threshold: no new request",
			st:   State{Failures: 3}, obs: Observation{Probe: problem, WedgeRecorded: true, Node: NodeView{Name: "n1", DriverReady: contract.False}}, wantFail: 3,
			events: []string{"NPUHostProblem"},
		},
		{
			name: "driver not up (fresh boot, install failed): the driver entry reports it; not ready, no event",
			obs:  Observation{Probe: problem, Node: NodeView{Name: "n1"}},
			want: Actions{DriverReady: ptrBool(false)},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, got := Decide(policy, tc.st, tc.obs)
			if st.Failures != tc.wantFail {
				t.Errorf("failures %d, want %d", st.Failures, tc.wantFail)
			}
			if gr, wr := reasons(got.Events), tc.events; strings.Join(gr, ",") != strings.Join(wr, ",") {
				t.Errorf("events %v, want %v", gr, wr)
			}
			for _, e := range got.Events {
				for _, part := range []string{"node n1", problem.Problem.What, "fix: " + problem.Problem.Fix, "no reboot"} {
					if !strings.Contains(e.Message, part) || !e.Warning {
						t.Errorf("event %q: want a warning containing %q", e.Message, part)
					}
				}
			}
			got.Events = nil
			if !sameActions(got, tc.want) {
				t.Errorf("actions %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

// However long npu-smi stays missing, a healthy node is never wedged; once
// it runs again and passes, the node is ready and a later problem is
// reported again.
func TestHostProblemNeverWedges(t *testing.T) {
	policy := Policy{FailureThreshold: 3, RecoveryThreshold: 1}
	problem := Result{Reason: "host problem", Problem: &host.ProblemError{What: "npu-smi cannot load its libraries", Fix: "check lib64"}}
	node := NodeView{Name: "n1", DriverReady: contract.True}
	st := State{}
	reported := 0
	for i := 0; i < 20; i++ {
		var a Actions
		st, a = Decide(policy, st, Observation{Probe: problem, Marker: true, Node: node})
		if a.RequestRecovery || a.RemoveMarker || a.RecordWedge {
			t.Fatalf("probe %d: host problem acted on as a wedge: %s", i, describe(a))
		}
		reported += len(a.Events)
		if a.DriverReady != nil {
			node.DriverReady = contract.False
		}
	}
	if reported != 1 || st.Failures != 0 {
		t.Fatalf("%d events over 20 probes, failures %d; want 1 event and no failure counted", reported, st.Failures)
	}
	st, a := Decide(policy, st, Observation{Probe: pass, Marker: true, Node: node})
	if a.DriverReady == nil || !*a.DriverReady || st.Problem != "" {
		t.Fatalf("after npu-smi runs again: %s, state %+v; want ready and the problem forgotten", describe(a), st)
	}
}

// The watcher on a simulated host whose npu-smi cannot load its libraries
// (exit 127 with the loader's message): many probes past the threshold
// leave the marker and the Node without a wedge, one NPUHostProblem event,
// driver-ready=false and the host-problem metric at 1; once npu-smi runs
// again the node is ready.
func TestWatcherHostProblemIsNoWedge(t *testing.T) {
	r := newRig(t, 2, nil, nil)
	k := r.keys
	_ = r.markers.SetReady("25.3.0")
	r.step(t)
	r.rec.take()
	loader := "npu-smi: error while loading shared libraries: libdrvdsmi_host.so: cannot open shared object file: No such file or directory\n"
	if err := r.host.SetSMI(simhost.SMIRaw, loader, 127); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 6; i++ {
		r.step(t)
	}
	n := r.node(t)
	if n.Labels[k.RebootRequired()] != "" || n.Annotations[k.RebootReason()] != "" || !r.markerPresent() {
		t.Fatalf("host problem taken for a wedge: labels %v annotations %v marker %v", n.Labels, n.Annotations, r.markerPresent())
	}
	if wedged, _ := r.markers.Wedged(); wedged {
		t.Fatal("host problem recorded as a wedge")
	}
	if n.Labels[k.DriverReady()] != contract.False {
		t.Fatalf("driver-ready=%q during a host problem, want false", n.Labels[k.DriverReady()])
	}
	evs := r.rec.take()
	if eventReasons(evs) != string(contract.EventNPUHostProblem) || !evs[0].warning || !strings.Contains(evs[0].message, "libdrvdsmi_host.so") || !strings.Contains(evs[0].message, "node n1") {
		t.Fatalf("events %+v, want one NPUHostProblem warning naming the node and the library", evs)
	}
	if v := testutil.ToFloat64(r.w.metrics.hostProblem); v != 1 {
		t.Fatalf("npu_healthwatch_host_problem = %v, want 1", v)
	}
	if v := testutil.ToFloat64(r.w.metrics.failures); v != 0 {
		t.Fatalf("consecutive failures = %v during a host problem, want 0", v)
	}
	if err := r.host.SetSMI(simhost.SMINormal, "", 0); err != nil {
		t.Fatal(err)
	}
	r.step(t)
	if n := r.node(t); n.Labels[k.DriverReady()] != contract.True || testutil.ToFloat64(r.w.metrics.hostProblem) != 0 {
		t.Fatalf("npu-smi runs again: driver-ready=%q host_problem=%v", n.Labels[k.DriverReady()], testutil.ToFloat64(r.w.metrics.hostProblem))
	}
}
