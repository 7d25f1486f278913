package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"go.uber.org/zap"

	"github.com/stratanet/strata/engine"
	"github.com/stratanet/strata/layers"
)

// Capabilities of a real-engine node: a short benchmark on the model at
// start gives the figures the cost model needs (memory bandwidth from a
// decode step, compute from a prefill), cached in the data dir so that a
// restart does not measure again. A simulated node declares its device.

// CapsFile is the name of the measured capabilities in the data dir.
const CapsFile = "capabilities.json"

type capsCache struct {
	Version int                     `json:"version"`
	Entries map[string]capsMeasured `json:"entries"`
}

type capsMeasured struct {
	Hardware   layers.Hardware `json:"hardware"`
	MeasuredAt time.Time       `json:"measured_at"`
	// DecodeLayer and PrefillLayer are one layer's step times measured.
	DecodeLayer  time.Duration `json:"decode_layer_ns"`
	PrefillLayer time.Duration `json:"prefill_layer_64_ns"`
}

// capsKey names a measurement: the same model on the same machine,
// engine and thread count gives the same figures. The pure-Go engine's
// key has no engine part, so that its figures cached before engines were
// named stay valid.
func capsKey(m *model) string {
	host, _ := os.Hostname()
	k := fmt.Sprintf("%s|%s/%s|cpus=%d|threads=%d|%s", m.info.Fingerprint, runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), m.threads, host)
	if e := m.engineName(); e != engine.EngineGo {
		k += "|engine=" + e
	}
	return k
}

// measureHardware returns this machine's figures for model m, from the
// cache in dataDir when there is one.
func measureHardware(ctx context.Context, m *model, memory int64, dataDir string, log *zap.Logger) (layers.Hardware, error) {
	key := capsKey(m)
	var cache capsCache
	path := ""
	if dataDir != "" {
		path = filepath.Join(dataDir, CapsFile)
		if b, err := os.ReadFile(path); err == nil {
			if err := json.Unmarshal(b, &cache); err != nil || cache.Version != 1 {
				log.Warn("capabilities cache unreadable; measuring again", zap.String("file", path))
				cache = capsCache{}
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			return layers.Hardware{}, fmt.Errorf("%w: %w", ErrConfig, err)
		}
		if e, ok := cache.Entries[key]; ok && e.Hardware.Validate() == nil {
			hw := e.Hardware
			hw.MemoryBytes = float64(memory)
			log.Info("capabilities from cache", zap.String("file", path), zap.Float64("mem_bandwidth_gbs", hw.MemBandwidth/1e9),
				zap.Float64("tflops", hw.TFLOPS), zap.Time("measured_at", e.MeasuredAt))
			return hw, nil
		}
	}
	e, err := benchmarkLayer(ctx, m, memory)
	if err != nil {
		return layers.Hardware{}, err
	}
	log.Info("capabilities measured", zap.Duration("decode_layer", e.DecodeLayer), zap.Duration("prefill_layer_64", e.PrefillLayer),
		zap.Float64("mem_bandwidth_gbs", e.Hardware.MemBandwidth/1e9), zap.Float64("tflops", e.Hardware.TFLOPS))
	if path != "" {
		if cache.Entries == nil {
			cache = capsCache{Version: 1, Entries: map[string]capsMeasured{}}
		}
		cache.Entries[key] = e
		b, _ := json.MarshalIndent(cache, "", "  ")
		tmp := path + ".tmp"
		err := os.MkdirAll(dataDir, 0o700)
		if err == nil {
			err = os.WriteFile(tmp, b, 0o600)
		}
		if err == nil {
			err = os.Rename(tmp, path)
		}
		if err != nil {
			log.Warn("capabilities not cached", zap.String("file", path), zap.Error(err))
		}
	}
	return e.Hardware, nil
}

// benchmarkLayer times one middle layer of the model: decode steps of
// one token (bound by reading the weights) and a 64-token prefill (bound
// by compute).
func benchmarkLayer(ctx context.Context, m *model, memory int64) (capsMeasured, error) {
	l := m.info.Layers / 2
	st, err := m.openLayer(l)
	if err != nil {
		return capsMeasured{}, err
	}
	defer st.Close()
	in := st.Info()
	const decodeSteps, warm, prefill = 32, 4, 64
	input := func(n int) engine.Step {
		s := engine.Step{}
		if in.First() {
			s.Tokens = make([]int32, n)
			for i := range s.Tokens {
				s.Tokens[i] = int32(i % in.Vocab)
			}
		} else {
			s.Hidden = make([]float32, n*in.Hidden)
			for i := range s.Hidden {
				s.Hidden[i] = float32(i%7) * 0.01
			}
		}
		return s
	}
	sess, err := st.NewSession(decodeSteps + warm)
	if err != nil {
		return capsMeasured{}, err
	}
	defer sess.Close()
	var dec time.Duration
	for i := 0; i < decodeSteps+warm; i++ {
		s := input(1)
		s.Session, s.Pos = sess, i
		t0 := time.Now()
		if _, err := st.Forward(ctx, s); err != nil {
			return capsMeasured{}, err
		}
		if i >= warm {
			dec += time.Since(t0)
		}
	}
	dec /= decodeSteps
	ps, err := st.NewSession(prefill)
	if err != nil {
		return capsMeasured{}, err
	}
	defer ps.Close()
	s := input(prefill)
	s.Session = ps
	t0 := time.Now()
	if _, err := st.Forward(ctx, s); err != nil {
		return capsMeasured{}, err
	}
	pre := max(time.Since(t0), time.Microsecond)
	dec = max(dec, time.Nanosecond)
	w := m.spec.LayerWeightBytes()
	hw := layers.Hardware{
		Name:         measuredName(m),
		MemoryBytes:  float64(memory),
		MemBandwidth: w / dec.Seconds(),
		TFLOPS:       float64(prefill) * m.spec.FLOPsPerToken(prefill/2) / pre.Seconds() / 1e12,
	}
	if err := hw.Validate(); err != nil {
		return capsMeasured{}, fmt.Errorf("%w: measured hardware: %w", ErrConfig, err)
	}
	return capsMeasured{Hardware: hw, MeasuredAt: time.Now().UTC(), DecodeLayer: dec, PrefillLayer: pre}, nil
}

// measuredName names measured hardware: the architecture and threads on
// the pure-Go engine, the engine (and so its device) on another.
func measuredName(m *model) string {
	if e := m.engineName(); e != engine.EngineGo {
		return "measured-" + e
	}
	return fmt.Sprintf("measured-%s-%dt", runtime.GOARCH, max(m.threads, runtime.GOMAXPROCS(0)))
}
