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
