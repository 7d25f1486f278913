package testnet

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

// TestCheckHistoryAtRunSize checks a history the size of a 10-minute
// run's (5 nodes, 3 lives each, 119 maps, a poll every 200 ms) within a
// second, and that one stale read in it is found.
func TestCheckHistoryAtRunSize(t *testing.T) {
	t0 := time.Unix(1_800_000_000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	rng := rand.New(rand.NewPCG(1, 2))
	var ops []MapOp
	const maps = 120
	applied := map[string][]float64{}
	for n := 0; n < 5; n++ {
		for life := 1; life <= 3; life++ {
			name := fmt.Sprintf("n%d", n)
			prev := float64((life - 1) * 200)
			first := true
			for e := 1; e <= maps; e++ {
				ret := float64(e)*5 + rng.Float64()*0.5
				if ret < prev || ret > float64(life*200) {
					continue
				}
				kind := OpApply
				if first && life > 1 {
					kind = OpRestore
				}
				first = false
				ops = append(ops, MapOp{Node: name, Life: life, Kind: kind, Epoch: uint64(e), Index: uint64(e), Hash: fmt.Sprint(e), Call: at(prev), Return: at(ret)})
				applied[fmt.Sprint(name, life)] = append(applied[fmt.Sprint(name, life)], ret)
				prev = ret
			}
		}
	}
	for s := 0.0; s < 600; s += 0.2 {
		// The epoch applied at least 0.6 s before the call.
		e := int(s/5) + 1
		if e < 2 || s-float64(e-1)*5 < 0.6 || s > 599 {
			continue
		}
		life := int(s/200) + 1
		ops = append(ops, MapOp{Node: "n0", Life: life, Kind: OpRead, Epoch: uint64(e - 1), Hash: fmt.Sprint(e - 1), Call: at(s), Return: at(s + 0.01)})
	}
	v := CheckHistory(ops, time.Minute)
	if !v.Linearizable || v.Maps != 119 || v.Lives != 15 {
		t.Fatalf("%d ops: %+v", len(ops), v)
	}
	// n0's third life applied epoch 100 by 500.5; at 510 it reads 99.
	ops = append(ops, MapOp{Node: "n0", Life: 3, Kind: OpRead, Epoch: 99, Hash: "99", Call: at(510), Return: at(510.01)})
	if got := checkPorcupine(ops, time.Minute); got != "illegal" {
		t.Fatalf("a stale read among %d ops: porcupine %s", len(ops), got)
	}
}
