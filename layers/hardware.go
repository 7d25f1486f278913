package layers

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

const (
	// GiB is 2^30 bytes; GPU memory sizes are binary.
	GiB = 1 << 30
	// GB is 10^9 bytes; bandwidths are decimal.
	GB = 1e9
	// Gbit is 10^9 bits, in bytes.
	Gbit = 1e9 / 8
)

// Hardware is what the cost model needs to know about a device.
type Hardware struct {
	Name         string  `yaml:"name" json:"name"`
	MemoryBytes  float64 `yaml:"memory_bytes" json:"memory_bytes"`
	MemBandwidth float64 `yaml:"mem_bandwidth" json:"mem_bandwidth"` // bytes/s
	TFLOPS       float64 `yaml:"tflops" json:"tflops"`               // dense FP16 with FP32 accumulate
	// NetBandwidth is the host's link for activations, bytes/s. Zero means
	// not modelled: links then never limit flow. A GPU has no network figure
	// of its own, so the table leaves it zero and nodes declare it.
	NetBandwidth float64 `yaml:"net_bandwidth" json:"net_bandwidth"`
}

// Validate reports a device the cost model cannot use.
func (h Hardware) Validate() error {
	switch {
	case !(h.MemoryBytes > 0) || math.IsInf(h.MemoryBytes, 0):
		return fmt.Errorf("%w: hardware %q: memory must be > 0", ErrBadSpec, h.Name)
	case !(h.MemBandwidth > 0) || math.IsInf(h.MemBandwidth, 0):
		return fmt.Errorf("%w: hardware %q: memory bandwidth must be > 0", ErrBadSpec, h.Name)
	case !(h.TFLOPS > 0) || math.IsInf(h.TFLOPS, 0):
		return fmt.Errorf("%w: hardware %q: tflops must be > 0", ErrBadSpec, h.Name)
	case h.NetBandwidth < 0 || math.IsNaN(h.NetBandwidth) || math.IsInf(h.NetBandwidth, 0):
		return fmt.Errorf("%w: hardware %q: net bandwidth must be >= 0", ErrBadSpec, h.Name)
	}
	return nil
}

// FLOPS is the dense compute rate in FLOP/s.
func (h Hardware) FLOPS() float64 { return h.TFLOPS * 1e12 }

// The device table. Figures are the vendors' datasheet numbers; TFLOPS is
// dense FP16 tensor throughput with FP32 accumulate (no sparsity).
var devices = map[string]Hardware{
	// NVIDIA H100 SXM5 datasheet: 80 GB HBM3, 3.35 TB/s, 989 TFLOPS FP16 dense.
	"h100": {Name: "h100", MemoryBytes: 80 * GiB, MemBandwidth: 3350 * GB, TFLOPS: 989},
	// NVIDIA A100 datasheet (SXM 80GB): 2,039 GB/s, 312 TFLOPS FP16 dense.
	"a100-80g": {Name: "a100-80g", MemoryBytes: 80 * GiB, MemBandwidth: 2039 * GB, TFLOPS: 312},
	// NVIDIA A100 datasheet (40GB): 1,555 GB/s, 312 TFLOPS FP16 dense.
	"a100-40g": {Name: "a100-40g", MemoryBytes: 40 * GiB, MemBandwidth: 1555 * GB, TFLOPS: 312},
	// NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, 362 TFLOPS FP16 dense.
	"l40s": {Name: "l40s", MemoryBytes: 48 * GiB, MemBandwidth: 864 * GB, TFLOPS: 362},
	// NVIDIA Blackwell (RTX 5090) whitepaper: 32 GB GDDR7, 1,792 GB/s,
	// 209.5 TFLOPS FP16 tensor with FP32 accumulate.
	"rtx5090": {Name: "rtx5090", MemoryBytes: 32 * GiB, MemBandwidth: 1792 * GB, TFLOPS: 209.5},
	// NVIDIA Ada (RTX 4090) whitepaper: 24 GB GDDR6X, 1,008 GB/s, 165.2 TFLOPS.
	"rtx4090": {Name: "rtx4090", MemoryBytes: 24 * GiB, MemBandwidth: 1008 * GB, TFLOPS: 165.2},
	// NVIDIA Ampere GA102 whitepaper (RTX 3090): 24 GB, 936 GB/s, 71 TFLOPS.
	"rtx3090": {Name: "rtx3090", MemoryBytes: 24 * GiB, MemBandwidth: 936 * GB, TFLOPS: 71},
	// NVIDIA RTX A6000 datasheet: 48 GB GDDR6, 768 GB/s; its 309.7 TFLOPS
	// tensor figure is with sparsity, so 154.8 dense FP16 (a workstation
	// part: FP32 accumulate at the full rate).
	"a6000": {Name: "a6000", MemoryBytes: 48 * GiB, MemBandwidth: 768 * GB, TFLOPS: 154.8},
	// NVIDIA RTX 4070 spec page: 12 GB GDDR6X, 504 GB/s; Ada whitepaper rate
	// per tensor core and clock gives 58.3 TFLOPS with FP32 accumulate.
	"rtx4070": {Name: "rtx4070", MemoryBytes: 12 * GiB, MemBandwidth: 504 * GB, TFLOPS: 58.3},
	// NVIDIA T4 datasheet: 16 GB GDDR6, 320 GB/s, 65 TFLOPS mixed precision.
	"t4": {Name: "t4", MemoryBytes: 16 * GiB, MemBandwidth: 320 * GB, TFLOPS: 65},
	// Apple M2 Ultra press release: 192 GB unified memory, 800 GB/s; the
	// 76-core GPU's 27.2 TFLOPS (Apple GPUs run FP16 at the FP32 rate).
	"m2-ultra": {Name: "m2-ultra", MemoryBytes: 192 * GiB, MemBandwidth: 800 * GB, TFLOPS: 27.2},
	// Apple M3 Max (40-core GPU) press release: 128 GB, 400 GB/s. Apple
	// publishes no TFLOPS: 40 cores × 128 ALUs × 2 × 1.6 GHz ≈ 16.4 is ours.
	"m3-max": {Name: "m3-max", MemoryBytes: 128 * GiB, MemBandwidth: 400 * GB, TFLOPS: 16.4},
}

// Device returns a device from the table by name (case-insensitive; "rtx"
// and "nvidia-" prefixes are optional). An unknown device is an error: its
// figures must then be declared or measured.
func Device(name string) (Hardware, error) {
	n := strings.ToLower(strings.TrimSpace(name))
	n = strings.TrimPrefix(n, "nvidia-")
	if h, ok := devices[n]; ok {
		return h, nil
	}
	if h, ok := devices["rtx"+n]; ok {
		return h, nil
	}
	return Hardware{}, fmt.Errorf("%w: unknown device %q: declare memory, mem_bandwidth and tflops (known: %s)",
		ErrBadSpec, name, strings.Join(DeviceNames(), ", "))
}

// DeviceNames lists the device table, sorted.
func DeviceNames() []string {
	names := make([]string, 0, len(devices))
	for n := range devices {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
