package testnet

import (
	"fmt"
	"testing"
)

// The ports of a run are distinct even when the kernel hands one out
// twice (a churn run once gave n3's libp2p port to n2's API too).
func TestDistinctPort(t *testing.T) {
	seq := []int{5000, 5000, 5001, 5000, 5001, 5002}
	next := func() (int, error) {
		p := seq[0]
		seq = seq[1:]
		return p, nil
	}
	used := map[int]bool{}
	var got []int
	for range 3 {
		p, err := distinctPort(used, next)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, p)
	}
	if fmt.Sprint(got) != "[5000 5001 5002]" {
		t.Errorf("ports %v, want [5000 5001 5002]", got)
	}
	if _, err := distinctPort(map[int]bool{7: true}, func() (int, error) { return 7, nil }); err == nil {
		t.Error("a source that repeats one used port gave a port")
	}
}
