package flagval

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// probeFixture builds a /dev with the named device nodes (as plain files)
// and, when smiGPUs >= 0, an nvidia-smi script listing that many GPUs.
func probeFixture(t *testing.T, devs []string, smiGPUs int, env map[string]string) DeviceProbe {
	t.Helper()
	dir := t.TempDir()
	dev := filepath.Join(dir, "dev")
	if err := os.Mkdir(dev, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range devs {
		if err := os.WriteFile(filepath.Join(dev, d), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	p := DeviceProbe{DevDir: dev, NumCPU: func() int { return 7 },
		LookupEnv: func(k string) (string, bool) { v, ok := env[k]; return v, ok }}
	if smiGPUs >= 0 {
		var b strings.Builder
		b.WriteString("#!/bin/sh\n[ \"$1\" = -L ] || exit 9\n")
		for i := range smiGPUs {
			b.WriteString("echo 'GPU " + string(rune('0'+i)) + ": NVIDIA H200 (UUID: GPU-x)'\n")
		}
		smi := filepath.Join(dir, "nvidia-smi")
		if err := os.WriteFile(smi, []byte(b.String()), 0o755); err != nil {
			t.Fatal(err)
		}
		p.NvidiaSMI = smi
	}
	return p
}

func TestResolveNproc(t *testing.T) {
	tests := []struct {
		name  string
		devs  []string
		smi   int
		env   map[string]string
		value string
		want  int
		err   string
	}{
		{name: "integer", value: "3", smi: -1, want: 3},
		{name: "zero", value: "0", smi: -1, err: "at least 1"},
		{name: "cpu", value: "cpu", smi: -1, want: 7},
		{name: "gpu from nvidia-smi", value: "gpu", smi: 8, devs: []string{"nvidia0"}, want: 8},
		{name: "gpu from /dev", value: "gpu", smi: -1, devs: []string{"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm"}, want: 2},
		{name: "gpu limited by CUDA_VISIBLE_DEVICES", value: "gpu", smi: 8, env: map[string]string{"CUDA_VISIBLE_DEVICES": "0,3,5"}, want: 3},
		{name: "CUDA_VISIBLE_DEVICES stops at invalid entry", value: "gpu", smi: 8, env: map[string]string{"CUDA_VISIBLE_DEVICES": "1,x,2"}, want: 1},
		{name: "CUDA_VISIBLE_DEVICES empty hides all", value: "gpu", smi: 8, env: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, err: "no accelerator"},
		{name: "gpu none", value: "gpu", smi: 0, err: "no accelerator"},
		{name: "npu", value: "npu", smi: -1, devs: []string{"davinci0", "davinci1", "davinci_manager"}, want: 2},
		{name: "npu visible", value: "npu", smi: -1, devs: []string{"davinci0", "davinci1"}, env: map[string]string{"ASCEND_RT_VISIBLE_DEVICES": "1"}, want: 1},
		{name: "auto gpu", value: "auto", smi: 4, want: 4},
		{name: "auto npu", value: "auto", smi: -1, devs: []string{"davinci0"}, want: 1},
		{name: "auto cpu", value: "auto", smi: -1, want: 7},
		{name: "bad", value: "tpu", smi: -1, err: "want an integer, cpu, gpu, npu or auto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := probeFixture(t, tt.devs, tt.smi, tt.env)
			n, _, err := p.ResolveNproc(context.Background(), tt.value)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), "--nproc-per-node") {
					t.Fatalf("ResolveNproc(%q) = %d, %v; want an error naming --nproc-per-node and %q", tt.value, n, err, tt.err)
				}
				if tt.err == "no accelerator" && !errors.Is(err, ErrNoDevices) {
					t.Errorf("error %v is not ErrNoDevices", err)
				}
				return
			}
			if err != nil || n != tt.want {
				t.Fatalf("ResolveNproc(%q) = %d, %v; want %d", tt.value, n, err, tt.want)
			}
		})
	}
}
