package standin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Chip models, as the test bed names them in chips.json.
const (
	Model910B = "910B"
	ModelA3   = "A3" // Atlas A3, chip type 910_93
	Model310P = "310P"
)

// ChipsFile is where the test bed keeps a node's chips (interface 8 of
// the session's notes; not a path the product reads). DevChipsFile is the
// copy beside the device nodes: a container sees the host's /dev (the
// chart mounts it into the device plugin) but not its /var, and the
// stand-in libdcmi.so, which stands for the kernel driver behind
// /dev/davinci_manager, reads it there.
const (
	ChipsFile    = "/var/lib/npu-stack-testbed/chips.json"
	DevChipsFile = "/dev/.npu-stack-testbed/chips.json"
)

// Chips is a node's NPU hardware as the stand-in driver reports it.
type Chips struct {
	// Model is Model910B, ModelA3 or Model310P: it picks npu-smi's layout
	// and the device plugin's resource name.
	Model string `json:"model"`
	// Name is the chip name npu-smi prints (default 910B3, Ascend910,
	// 310P3, as in the vendor's samples).
	Name string `json:"name,omitempty"`
	// ChipsPerCard: 2 on A3 (default), 1 otherwise; 2 models an Atlas
	// 300I Duo.
	ChipsPerCard int `json:"chipsPerCard,omitempty"`
	// DCMIInit, when not 0, is the DCMI code dcmi_init() returns, such as
	// -8005 (internal error) or -8020 (device busy).
	DCMIInit int    `json:"dcmiInit,omitempty"`
	Chips    []Chip `json:"chips"`
}

// Chip is one chip; Health is npu-smi's Health value: OK, Warning,
// Alarm, Critical or UNKNOWN.
type Chip struct {
	Health string `json:"health"`
}

// NewChips is n healthy chips of model.
func NewChips(model string, n int) Chips {
	c := Chips{Model: model}
	for range n {
		c.Chips = append(c.Chips, Chip{Health: "OK"})
	}
	return c
}

// ResourceName is the extended resource the device plugin advertises for
// the model (Ascend/mind-cluster v7.3.0 component/ascend-common/api/
// default_name.go: huawei.com/Ascend910, huawei.com/Ascend310P).
func (c Chips) ResourceName() string {
	if c.Model == Model310P {
		return "huawei.com/Ascend310P"
	}
	return "huawei.com/Ascend910"
}

// WriteChips writes c to ChipsFile and DevChipsFile of a node whose
// paths are mapped to the host by path (realnode.Node.Path, or a
// directory's filepath.Join).
func WriteChips(path func(string) string, c Chips) error {
	if err := checkModel(c.Model); err != nil {
		return fmt.Errorf("chips.json: %w", err)
	}
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	for _, f := range []string{ChipsFile, DevChipsFile} {
		p := path(f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return fmt.Errorf("chips.json: %w", err)
		}
		tmp := p + ".tmp"
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return fmt.Errorf("chips.json: %w", err)
		}
		if err := os.Rename(tmp, p); err != nil {
			return fmt.Errorf("chips.json: %w", err)
		}
	}
	return nil
}

func checkModel(model string) error {
	switch model {
	case Model910B, ModelA3, Model310P:
		return nil
	}
	return fmt.Errorf("chip model %q: want %s, %s or %s", model, Model910B, ModelA3, Model310P)
}
