package ggml

import (
	"errors"
	"testing"
)

// TestProbe: the CPU device is always there, with the host's memory (0);
// a GPU is found only with its backend library (none here: then
// ErrGGML), and Auto falls back to the CPU.
func TestProbe(t *testing.T) {
	LoadLibDir(t.TempDir()) // no libraries: nothing loads, nothing fails
	cpu, err := Probe(CPU)
	if err != nil || cpu.Name != "CPU" || cpu.Memory != 0 || cpu.Engine() != "ggml-CPU" {
		t.Fatalf("CPU: %+v, %v", cpu, err)
	}
	auto, err := Probe(Auto)
	if err != nil {
		t.Fatal(err)
	}
	gpu, err := Probe(GPU)
	switch {
	case errors.Is(err, ErrGGML):
		if auto != cpu {
			t.Fatalf("Auto without a GPU: %+v, want the CPU", auto)
		}
	case err != nil:
		t.Fatal(err)
	default: // a GPU built in (Metal)
		if gpu.Memory <= 0 || auto != gpu {
			t.Fatalf("GPU %+v, Auto %+v", gpu, auto)
		}
	}
	if _, err := Probe(Device(9)); !errors.Is(err, ErrGGML) {
		t.Fatalf("an unknown device: %v", err)
	}
}

// TestRepack: a Q4_K_M file's Q4_K matrices go to ggml's CPU_REPACK
// layout exactly where this build has it (REPACK) and kernels for it
// (AVX2, or NEON's dot products), and no matrix does with WithoutRepack;
// TestQuantizedAgreesWithEngine checks the logits either way.
func TestRepack(t *testing.T) {
	fs := CPUFeatures()
	if len(fs) == 0 {
		t.Fatal("ggml reports no CPU features")
	}
	t.Logf("ggml CPU features: %v", fs)
	path := genMix(t, "llama-gqa", kShapes["llama-gqa"], "q4_k_m")
	s := open(t, path, WithDevice(CPU))
	want := fs["REPACK"] == "1" && (fs["AVX2"] == "1" || fs["DOTPROD"] == "1" || fs["MATMUL_INT8"] == "1")
	if got := s.Repacked() > 0; got != want {
		t.Errorf("%d matrices repacked; want some: %v", s.Repacked(), want)
	}
	if n := open(t, path, WithDevice(CPU), WithoutRepack()).Repacked(); n != 0 {
		t.Errorf("WithoutRepack: %d matrices repacked", n)
	}
}

// TestEngineLabel: a GPU's label names its model in whole words within a
// heartbeat's 32 bytes, without the parenthesised detail; the CPU's stays
// "ggml-CPU".
func TestEngineLabel(t *testing.T) {
	for _, c := range []struct {
		d    DeviceInfo
		want string
	}{
		{DeviceInfo{Name: "CPU", Description: "AMD EPYC 9654 96-Core Processor"}, "ggml-CPU"},
		{DeviceInfo{Name: "Vulkan0", Description: "llvmpipe (LLVM 15.0.6, 256 bits)"}, "ggml-Vulkan0 llvmpipe"},
		{DeviceInfo{Name: "CUDA0", Description: "NVIDIA H100 80GB HBM3"}, "ggml-CUDA0 NVIDIA H100 80GB HBM3"},
		{DeviceInfo{Name: "CUDA1", Description: "NVIDIA GeForce RTX 4090 Laptop GPU"}, "ggml-CUDA1 NVIDIA GeForce RTX"},
		{DeviceInfo{Name: "CUDA0", Description: "Supercalifragilisticexpialidocious"}, "ggml-CUDA0"},
		{DeviceInfo{Name: "Metal"}, "ggml-Metal"},
	} {
		got := c.d.Engine()
		if got != c.want || len(got) > maxLabel {
			t.Errorf("%+v: label %q (%d bytes), want %q", c.d, got, len(got), c.want)
		}
	}
}
