package engine

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stratanet/strata/layers"
)

func TestSimStage(t *testing.T) {
	spec, err := layers.Model("llama-3-70b")
	if err != nil {
		t.Fatal(err)
	}
	hw, _ := layers.Device("rtx4090")
	var slept []time.Duration
	rec := WithSimSleep(func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil })
	ctx := context.Background()
	run := func(cuts []int) ([][]float32, []int32) {
		var stages []Stage
		var sess []Session
		for i := 0; i+1 < len(cuts); i++ {
			s, err := NewSimStage(spec, hw, WithRange(cuts[i], cuts[i+1]), rec)
			if err != nil {
				t.Fatal(err)
			}
			ss, _ := s.NewSession(64)
			stages, sess = append(stages, s), append(sess, ss)
		}
		var logits [][]float32
		var toks []int32
		in := []int32{1, 2, 3}
		for step := 0; step < 8; step++ {
			st := Step{Tokens: in}
			for i, s := range stages {
				st.Session, st.Pos = sess[i], sess[i].Len()
				out, err := s.Forward(ctx, st)
				if err != nil {
					t.Fatal(err)
				}
				if out.Logits != nil {
					logits = append(logits, out.Logits)
					tok := Sample(out.Logits, SamplingParams{Temperature: 1, Seed: 5}, sess[i].Len(), nil)
					toks = append(toks, tok)
					in = []int32{tok}
				}
				st = Step{Hidden: out.Hidden}
			}
		}
		return logits, toks
	}
	wantL, wantT := run([]int{0, 80})
	for _, cuts := range [][]int{{0, 20, 80}, {0, 1, 40, 79, 80}} {
		gotL, gotT := run(cuts)
		for i := range wantL {
			if !sameBits(gotL[i], wantL[i]) {
				t.Fatalf("cuts %v: simulated logits differ at step %d", cuts, i)
			}
		}
		if fmt.Sprint(gotT) != fmt.Sprint(wantT) {
			t.Fatalf("cuts %v: tokens %v, want %v", cuts, gotT, wantT)
		}
	}
	// Timing comes from the cost model: one decode step of the whole 70B
	// model on one 4090 reads ~140 GB of fp16 weights at ~1 TB/s.
	s, _ := NewSimStage(spec, hw, rec)
	slept = nil
	ss, _ := s.NewSession(16)
	if _, err := s.Forward(ctx, Step{Session: ss, Tokens: []int32{7}}); err != nil {
		t.Fatal(err)
	}
	want := 80*layers.DecodeLayerTime(spec, hw, 1, 1) + spec.HeadBytes()/hw.MemBandwidth
	if len(slept) != 1 || slept[0].Seconds() < want*0.999 || slept[0].Seconds() > want*1.001 || slept[0] < 100*time.Millisecond {
		t.Errorf("slept %v, want %.4fs", slept, want)
	}
	info := s.Info()
	if !info.Simulated || !strings.HasSuffix(info.Name, SimSuffix) || !strings.Contains(s.String(), "SIMULATED") ||
		!strings.HasPrefix(info.Fingerprint, "simulated-") {
		t.Errorf("not labelled simulated: %+v", info)
	}
	// A cancelled context stops the real wait.
	real, _ := NewSimStage(spec, hw)
	rs, _ := real.NewSession(4)
	cctx, cancel := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel()
	if _, err := real.Forward(cctx, Step{Session: rs, Tokens: []int32{1}}); err == nil || rs.Len() != 0 {
		t.Errorf("cancelled simulated step: %v, len %d", err, rs.Len())
	}
	tok, err := SimTokenizer(spec.Vocab)
	if err != nil || tok.Vocab() != spec.Vocab {
		t.Fatalf("sim tokenizer: %v", err)
	}
	var _ Stage = s
	var _ Stage = (*Local)(nil)
}
