package testnet

import (
	"errors"
	"strings"
	"testing"

	"github.com/stratanet/strata/engine"
)

// A scenario's model.dtype reaches the generator as `strata model gen
// --dtype` reads it (a type, or one of llama.cpp's mixes), and a name the
// generator does not know is refused, naming the field.
func TestModelSpecDType(t *testing.T) {
	for _, c := range []struct {
		dtype string
		want  engine.DType
		mix   string
	}{{"", engine.F32, ""}, {"q8_0", engine.Q8_0, ""}, {"f16", engine.F16, ""}, {"q4_k_m", engine.F32, "q4_k_m"}} {
		sc, err := ParseScenario([]byte(strings.Replace(goodScenario, "seed: 1}", "seed: 1, dtype: '"+c.dtype+"', sliding_window: 6}", 1)))
		if err != nil {
			t.Fatalf("dtype %q: %v", c.dtype, err)
		}
		gc, err := sc.Model.genConfig()
		if err != nil {
			t.Fatalf("dtype %q: %v", c.dtype, err)
		}
		if gc.DType != c.want || gc.Mix != c.mix || gc.SlidingWindow != 6 {
			t.Errorf("dtype %q: type %v, mix %q, window %d; want %v, %q, 6", c.dtype, gc.DType, gc.Mix, gc.SlidingWindow, c.want, c.mix)
		}
	}
	for edit, field := range map[string]string{"dtype: q3_x": "model.dtype", "sliding_window: -1": "model.sliding_window"} {
		_, err := ParseScenario([]byte(strings.Replace(goodScenario, "seed: 1}", "seed: 1, "+edit+"}", 1)))
		if !errors.Is(err, ErrScenario) || !strings.Contains(err.Error(), field) {
			t.Errorf("%s: error %v, want ErrScenario naming %s", edit, err, field)
		}
	}
}
