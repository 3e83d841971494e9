package deviceplugin

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

func TestParseQueryAndDeviceList(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want map[string]string
	}{
		{"910B, chip 1 critical", "0 0 0 910B3\n1 1 3 910B3\n2 2 1 910B3\n", map[string]string{
			"huawei.com/Ascend910":                  "Ascend910-0,Ascend910-2",
			"huawei.com/Ascend910-Unhealthy":        "Ascend910-1",
			"huawei.com/Ascend910-NetworkUnhealthy": "",
			"huawei.com/Ascend910-Recovering":       "",
			"huawei.com/Ascend910-Fault":            "[]",
		}},
		{"310P, chip 0 alarm", "0 0 2 310P3\n1 1 0 310P3\n", map[string]string{
			"huawei.com/Ascend310P":           "Ascend310P-1",
			"huawei.com/Ascend310P-Unhealthy": "Ascend310P-0",
			"huawei.com/Ascend310P-Fault":     "[]",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chips, err := ParseQuery([]byte(tc.out))
			if err != nil {
				t.Fatal(err)
			}
			if got := DeviceList(chips); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("device list %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := ParseQuery([]byte("0 0 OK\n")); err == nil {
		t.Error("a malformed line parsed")
	}
	if _, err := ParseQuery(nil); err == nil {
		t.Error("no chips parsed without error")
	}
}

func TestDeviceInfoConfigMapFormat(t *testing.T) {
	chips, err := ParseQuery([]byte("0 0 0 910B3\n1 1 3 910B3\n"))
	if err != nil {
		t.Fatal(err)
	}
	cm, err := DeviceInfoConfigMap("node-a", chips, time.Unix(1700000000, 0))
	if err != nil {
		t.Fatal(err)
	}
	if cm.Name != "mindx-dl-deviceinfo-node-a" || cm.Namespace != "kube-system" || cm.Labels["mx-consumer-cim"] != "true" {
		t.Errorf("ConfigMap %s/%s labels %v", cm.Namespace, cm.Name, cm.Labels)
	}
	var got struct {
		DeviceInfo  json.RawMessage
		SuperPodID  int32
		ServerIndex int32
		CheckCode   string
	}
	if err := json.Unmarshal([]byte(cm.Data["DeviceInfoCfg"]), &got); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(got.DeviceInfo)
	if got.CheckCode != hex.EncodeToString(sum[:]) {
		t.Errorf("CheckCode %s is not the SHA-256 of DeviceInfo %s", got.CheckCode, got.DeviceInfo)
	}
	want := `{"DeviceList":{"huawei.com/Ascend910":"Ascend910-0","huawei.com/Ascend910-Fault":"[]","huawei.com/Ascend910-NetworkUnhealthy":"","huawei.com/Ascend910-Recovering":"","huawei.com/Ascend910-Unhealthy":"Ascend910-1"},"UpdateTime":1700000000}`
	if string(got.DeviceInfo) != want || got.SuperPodID != -2 || got.ServerIndex != -2 {
		t.Errorf("DeviceInfoCfg %s", cm.Data["DeviceInfoCfg"])
	}
	if _, ok := cm.Data["ManuallySeparateNPU"]; !ok || cm.Data["Description"] == "" {
		t.Errorf("data keys %v", cm.Data)
	}
}
