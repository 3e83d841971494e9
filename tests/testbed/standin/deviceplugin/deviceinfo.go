package deviceplugin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The ConfigMap of Ascend/mind-cluster v7.3.0 (commit 012fa8e3):
// component/ascend-device-plugin/pkg/common/constants.go l.70-83,
// component/ascend-common/api/consts.go l.32, l.97, l.106.
const (
	deviceInfoPrefix   = "mindx-dl-deviceinfo-"
	kubeNS             = "kube-system"
	deviceInfoKey      = "DeviceInfoCfg"
	separateKey        = "ManuallySeparateNPU"
	descriptionKey     = "Description"
	descriptionValue   = "The field[xxx.com/xxx] is sunset. Volcano has the ability to maintain the usage status of chips on its own, and can temporarily use this field by configuring the Volcano parameter 'self-maintain-available-card'"
	consumerLabelKey   = "mx-consumer-cim"
	consumerLabelValue = "true"
	resourcePrefix     = "huawei.com/"
)

// nodeDeviceInfo and nodeDeviceInfoCache are pkg/common/proto.go's
// NodeDeviceInfo and NodeDeviceInfoCache: field names are the JSON keys.
type nodeDeviceInfo struct {
	DeviceList map[string]string
	UpdateTime int64
}

type nodeDeviceInfoCache struct {
	DeviceInfo  nodeDeviceInfo
	SuperPodID  int32
	ServerIndex int32
	CheckCode   string
}

// DeviceList is the ConfigMap's device list for the chips: for 910
// (pkg/device/ascend910.go updateDeviceInfo) the healthy devices, the
// -Unhealthy, -NetworkUnhealthy, -Recovering lists and the -Fault JSON;
// for 310P (ascend310p.go updateDeviceInfo) the healthy devices,
// -Unhealthy and -Fault. The stand-in knows no fault codes and no
// allocations: -Fault is an empty list and every healthy chip is listed
// as free.
func DeviceList(chips []Chip) map[string]string {
	if len(chips) == 0 {
		return map[string]string{}
	}
	typ := resourcePrefix + chips[0].DeviceType()
	var healthy, unhealthy []string
	for _, c := range chips {
		if c.Healthy() {
			healthy = append(healthy, c.DeviceName())
		} else {
			unhealthy = append(unhealthy, c.DeviceName())
		}
	}
	l := map[string]string{
		typ:                strings.Join(healthy, ","),
		typ + "-Unhealthy": strings.Join(unhealthy, ","),
		typ + "-Fault":     "[]",
	}
	if chips[0].DeviceType() == "Ascend910" {
		l[typ+"-NetworkUnhealthy"] = ""
		l[typ+"-Recovering"] = ""
	}
	return l
}

// DeviceInfoConfigMap is the mindx-dl-deviceinfo-<node> ConfigMap
// (pkg/kubeclient/client_server.go WriteDeviceInfoDataIntoCM; CheckCode
// is the SHA-256 of the DeviceInfo JSON, pkg/common/common.go
// MakeDataHash). SuperPodID and ServerIndex are -2, what
// pkg/server/manager.go setSuperPodInfo() keeps when the chips give no
// super-pod information (getSuperPodInfo: SuperPodIdAbnormal,
// ServerIdAbnormal, pkg/common/constants.go l.715-724). The A3 form adds
// SwitchInfoCfg, which this stand-in does not write.
func DeviceInfoConfigMap(node string, chips []Chip, now time.Time) (*corev1.ConfigMap, error) {
	cache := nodeDeviceInfoCache{
		DeviceInfo:  nodeDeviceInfo{DeviceList: DeviceList(chips), UpdateTime: now.Unix()},
		SuperPodID:  -2,
		ServerIndex: -2,
	}
	info, err := json.Marshal(cache.DeviceInfo)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(info)
	cache.CheckCode = hex.EncodeToString(sum[:])
	data, err := json.Marshal(cache)
	if err != nil {
		return nil, err
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      deviceInfoPrefix + node,
			Namespace: kubeNS,
			Labels:    map[string]string{consumerLabelKey: consumerLabelValue},
		},
		Data: map[string]string{
			deviceInfoKey:  string(data),
			separateKey:    "",
			descriptionKey: descriptionValue,
		},
	}, nil
}

// WriteDeviceInfo updates the ConfigMap, creating it when absent, as
// upstream does (client_server.go createOrUpdateDeviceCM: update first):
// the verbs update and create on configmaps in kube-system.
func WriteDeviceInfo(ctx context.Context, c kubernetes.Interface, cm *corev1.ConfigMap) error {
	_, err := c.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = c.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("write ConfigMap %s/%s: %w", cm.Namespace, cm.Name, err)
	}
	return nil
}
