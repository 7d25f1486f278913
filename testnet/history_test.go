package testnet

import (
	"bufio"
	"strings"
	"testing"
	"time"
)

// forged builds a history: three nodes apply maps 1..4 (n3 restarts and
// restores a snapshot of epoch 2), and the runner reads along.
type forged struct {
	t0  time.Time
	ops []MapOp
}

func (f *forged) at(s float64) time.Time { return f.t0.Add(time.Duration(s * float64(time.Second))) }

func (f *forged) add(node string, life int, kind string, epoch uint64, hash string, call, ret float64) {
	f.ops = append(f.ops, MapOp{Node: node, Life: life, Kind: kind, Epoch: epoch, Hash: hash, Index: epoch * 10,
		Call: f.at(call), Return: f.at(ret)})
}

func goodHistory() *forged {
	f := &forged{t0: time.Unix(1_800_000_000, 0)}
	maps := []string{"", "aa", "bb", "cc", "dd"}
	// Each node applies epoch e at about e seconds; its ops chain.
	for _, n := range []string{"n1", "n2"} {
		prev := 0.0
		for e := uint64(1); e <= 4; e++ {
			ret := float64(e) + 0.1
			if n == "n2" {
				ret += 0.05
			}
			f.add(n, 1, OpApply, e, maps[e], prev, ret)
			prev = ret
		}
	}
	// n3 applies 1 and 2, is killed, restarts at 3.0, restores epoch 2
	// from its snapshot and applies 3 and 4.
	f.add("n3", 1, OpApply, 1, "aa", 0, 1.2)
	f.add("n3", 1, OpApply, 2, "bb", 1.2, 2.2)
	f.add("n3", 2, OpRestore, 2, "bb", 3.0, 3.05)
	f.add("n3", 2, OpApply, 3, "cc", 3.05, 3.3)
	f.add("n3", 2, OpApply, 4, "dd", 3.3, 4.3)
	// Polls: each sees what its node applied, or newer (a notice).
	f.add("n1", 1, OpRead, 1, "aa", 1.5, 1.51)
	f.add("n1", 1, OpRead, 2, "bb", 2.5, 2.51)
	f.add("n2", 1, OpRead, 3, "cc", 2.9, 2.91) // a notice ahead of its replica
	f.add("n1", 1, OpRead, 4, "dd", 4.5, 4.51)
	return f
}

func TestCheckHistoryAcceptsALinearizableHistory(t *testing.T) {
	v := CheckHistory(goodHistory().ops, 10*time.Second)
	if !v.Linearizable || v.Porcupine != "ok" || len(v.Violations) > 0 {
		t.Fatalf("a good history rejected: %+v", v)
	}
	if v.Maps != 4 || v.Lives != 4 || v.Applies != 12 || v.Restores != 1 || v.Reads != 4 {
		t.Fatalf("counts: %+v", v)
	}
}

// Each forgery is a bug the checker must catch; porcupine says whether
// Porcupine alone must find the history illegal.
func TestCheckHistoryCatchesForgeries(t *testing.T) {
	for _, tc := range []struct {
		name      string
		forge     func(f *forged)
		want      string // in a violation
		porcupine bool
	}{
		{"two maps at one epoch", func(f *forged) {
			// n2 applies a different map at epoch 3: the broken build's
			// epoch reuse, or a split brain.
			for i := range f.ops {
				if f.ops[i].Node == "n2" && f.ops[i].Epoch == 3 {
					f.ops[i].Hash = "c2"
				}
			}
		}, "epoch 3 has two maps", true},
		{"a committed map skipped", func(f *forged) {
			var out []MapOp
			for _, o := range f.ops {
				if !(o.Node == "n2" && o.Epoch == 2 && o.Kind == OpApply) {
					out = append(out, o)
				}
			}
			f.ops = out
		}, "never epoch 2", true},
		{"epochs go backwards", func(f *forged) {
			f.add("n1", 1, OpApply, 2, "bb", 4.1, 4.2)
		}, "go backwards", true},
		{"a stale read after an apply", func(f *forged) {
			// n1 applied epoch 4 at 4.1; a poll at 5 returns epoch 3.
			f.add("n1", 1, OpRead, 3, "cc", 5, 5.01)
		}, "went back", true},
		{"a read of a map nobody applied", func(f *forged) {
			f.add("n2", 1, OpRead, 9, "zz", 5, 5.01)
		}, "no member applied", true},
		{"one raft index, two records", func(f *forged) {
			for i := range f.ops {
				if f.ops[i].Node == "n3" && f.ops[i].Epoch == 4 && f.ops[i].Kind == OpApply {
					f.ops[i].Index = 30
				}
			}
		}, "raft index 30", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := goodHistory()
			tc.forge(f)
			v := CheckHistory(f.ops, 10*time.Second)
			if v.Linearizable {
				t.Fatalf("forged history accepted: %+v", v)
			}
			if !strings.Contains(strings.Join(v.Violations, "\n"), tc.want) {
				t.Fatalf("violations %q lack %q", v.Violations, tc.want)
			}
			if tc.porcupine && v.Porcupine != "illegal" {
				t.Fatalf("porcupine said %s, want illegal", v.Porcupine)
			}
		})
	}
}

// Porcupine alone, without the direct check: a read that is older than
// what its node applied before the read began is caught only by the real
// time of the operations.
func TestPorcupineUsesRealTime(t *testing.T) {
	f := goodHistory()
	// n3's second life applied epoch 4 by 4.3; a read of n3 at 4.4
	// returning epoch 2 cannot be linearized. At 3.2, before it applied
	// epoch 3, the same read is fine.
	ok := append([]MapOp(nil), f.ops...)
	ok = append(ok, MapOp{Node: "n3", Life: 2, Kind: OpRead, Epoch: 2, Hash: "bb", Call: f.at(3.2), Return: f.at(3.21)})
	if got := checkPorcupine(ok, 10*time.Second); got != "ok" {
		t.Fatalf("a timely read: porcupine %s", got)
	}
	f.add("n3", 2, OpRead, 2, "bb", 4.4, 4.41)
	if got := checkPorcupine(f.ops, 10*time.Second); got != "illegal" {
		t.Fatalf("a stale read: porcupine %s", got)
	}
}

func TestParseNodeLog(t *testing.T) {
	start := time.Unix(1_800_000_000, 0)
	log := strings.Join([]string{
		"=== testnet: start 1: /bin/strata node",
		"09:00:01.000\tINFO\tconsensus\tconsensus/maplog.go:44\tmap applied\t" +
			`{"node": "abc", "epoch": 1, "index": 3, "hash": "aa", "stages": 1, "at_us": 1800000001000000}`,
		"09:00:01.500\tINFO\tnode\tcommitted map\t{\"epoch\": 1}",
		"=== testnet: start 2: /bin/strata node",
		`{"level":"info","msg":"map restored","epoch":1,"hash":"aa","stages":1,"at_us":1800000005000000}`,
		"09:00:06.000\tINFO\tconsensus\tmap applied\t" +
			`{"epoch": 2, "index": 9, "hash": "bb", "stages": 2, "at_us": 1800000006000000}`,
	}, "\n")
	ops, err := parseNodeLines(bufio.NewScanner(strings.NewReader(log)), "n1", []time.Time{start, start.Add(4 * time.Second)})
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != 3 {
		t.Fatalf("ops %+v", ops)
	}
	want := []MapOp{
		{Node: "n1", Life: 1, Kind: OpApply, Epoch: 1, Hash: "aa", Index: 3},
		{Node: "n1", Life: 2, Kind: OpRestore, Epoch: 1, Hash: "aa"},
		{Node: "n1", Life: 2, Kind: OpApply, Epoch: 2, Hash: "bb", Index: 9},
	}
	for i, w := range want {
		o := ops[i]
		if o.Node != w.Node || o.Life != w.Life || o.Kind != w.Kind || o.Epoch != w.Epoch || o.Hash != w.Hash || o.Index != w.Index {
			t.Fatalf("op %d: %+v, want %+v", i, o, w)
		}
		if !o.Call.Before(o.Return) {
			t.Fatalf("op %d: call %v not before return %v", i, o.Call, o.Return)
		}
	}
	if !ops[1].Call.After(start.Add(4*time.Second)) || !ops[2].Call.After(ops[1].Return) {
		t.Fatalf("a life's operations chain from its start: %+v", ops)
	}
}
