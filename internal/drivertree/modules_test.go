package drivertree

import (
	"reflect"
	"strings"
	"testing"
)

// upstream910B is the line of hicann/driver v8.5.0 scripts/package/custom/
// driver/ascend910B/scripts/specific_func.inc (l.14); ascend910_93's is
// the same.
const upstream910B = `occupy_space=300
vendor_bdf="0x19e5"
mode_normal="asdrv_queue|asdrv_buff|ts_agent|ts_debug|debug_switch|npu_peermem|asdrv_trs|asdrv_esched|asdrv_trsbase|asdrv_svm|asdrv_vnic|drv_pcie_hdc_host|asdrv_dms|asdrv_fms|asdrv_vmng|ascend_soc_platform|asdrv_dpa|drv_pcie_host|ascend_msg_chan_host|asdrv_vpc|drv_vascend|drv_vascend_stub|asdrv_pbl|ascend_kernel_open_adapt|drv_seclib_host"
mode_debug="${mode_normal}"
`

func TestParseModuleList(t *testing.T) {
	mods, err := ParseModuleList([]byte(upstream910B))
	if err != nil {
		t.Fatal(err)
	}
	if len(mods) != 25 || mods[0] != "asdrv_queue" || mods[24] != "drv_seclib_host" {
		t.Fatalf("got %d modules %v", len(mods), mods)
	}
	for _, bad := range []string{"", "mode_debug=\"${mode_normal}\"\n", "mode_normal=${x}\n", "mode_normal=\"a||b\"\n", "mode_normal=\"a b\"\n"} {
		if _, err := ParseModuleList([]byte(bad)); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func names(ms []Module) string {
	var s []string
	for _, m := range ms {
		n := m.Name
		if m.Optional {
			n += "?"
		}
		s = append(s, n)
	}
	return strings.Join(s, " ")
}

func TestLoadOrder(t *testing.T) {
	listed, _ := ParseModuleList([]byte(upstream910B))
	for _, tc := range []struct {
		name     string
		present  []string
		ksecurec bool
		want     string
		err      bool
	}{
		{name: "reverse of the unload order, absent ones skipped",
			present: []string{"drv_seclib_host", "asdrv_pbl", "drv_pcie_host", "drv_vascend", "asdrv_dms", "extra_not_listed"},
			want:    "drv_seclib_host asdrv_pbl drv_vascend? drv_pcie_host asdrv_dms"},
		{name: "ksecurec in the kernel: no drv_seclib_host",
			present: []string{"drv_seclib_host", "drv_pcie_host"}, ksecurec: true, want: "drv_pcie_host"},
		{name: "npu_peermem is never loaded by the installer",
			present: []string{"npu_peermem", "drv_pcie_host"}, want: "drv_pcie_host"},
		{name: "no host driver module", present: []string{"drv_seclib_host", "asdrv_pbl"}, err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := LoadOrder(listed, tc.present, tc.ksecurec)
			if tc.err {
				if err == nil {
					t.Fatalf("accepted: %v", names(got))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if names(got) != tc.want {
				t.Fatalf("got  %s\nwant %s", names(got), tc.want)
			}
		})
	}
}

func TestRequired(t *testing.T) {
	got, err := Required(ModeTree, "", "")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/script/specific_func.inc", "/usr/local/Ascend/driver/tools/npu-smi", "/usr/local/Ascend/driver/host/"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v", got)
	}
	if got, err := Required("", "/x.run", ""); err != nil || !reflect.DeepEqual(got, []string{"/x.run"}) {
		t.Fatalf("run: %v %v", got, err)
	}
	if _, err := Required("rpm", "", ""); err == nil {
		t.Fatal("unknown mode accepted")
	}
}
