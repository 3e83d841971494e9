// Package contract names the node contract (docs/architecture.md): the labels,
// annotations and events through which every npu-stack component and the
// administrator communicate. All keys live here so that no component spells
// one differently.
package contract

// Labels that identify an NPU node and select its driver profile. They are
// written by the administrator or a Node Feature Discovery rule.
const (
	// LabelNPUPresent marks an NPU node (the chart's npuNodeSelector).
	LabelNPUPresent = "openfuyao.com/npu.present"
	// LabelChip is the NPU model of the node, such as 910b or 310p.
	LabelChip = "openfuyao.com/npu.chip"
	// LabelKernel is the full kernel version, as Node Feature Discovery
	// publishes it.
	LabelKernel = "feature.node.kubernetes.io/kernel-version.full"
	// LabelOS is the operating system release, such as ubuntu22.04.
	LabelOS = "openfuyao.com/npu.os"
	// NPUResourcePrefix marks the extended resources of Ascend NPUs
	// (huawei.com/Ascend910, huawei.com/Ascend310P, ...).
	NPUResourcePrefix = "huawei.com/"
)
