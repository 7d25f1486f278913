package sched

import "testing"

func TestUnload(t *testing.T) {
	for _, c := range []struct {
		released bool
		users    int
		want     bool
	}{
		{released: false, users: 0, want: false}, // a kept layer stays, idle or not
		{released: false, users: 3, want: false},
		{released: true, users: 2, want: false}, // sessions still run on it
		{released: true, users: 1, want: false},
		{released: true, users: 0, want: true}, // the last one ended
	} {
		if got := Unload(c.released, c.users); got != c.want {
			t.Errorf("Unload(%v, %d) = %v, want %v", c.released, c.users, got, c.want)
		}
	}
}
