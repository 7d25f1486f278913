package testnet

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestNetnsDelaySchedule(t *testing.T) {
	spec := NetworkSpec{
		Regions: []RegionSpec{
			{Name: "eu", RTT: 20 * time.Millisecond, Jitter: 4 * time.Millisecond, Loss: 0.01},
			{Name: "us", RTT: 30 * time.Millisecond},
		},
		Links: []LinkSpec{{Between: [2]string{"us", "eu"}, RTT: 100 * time.Millisecond, Loss: 0.2}},
	}
	m, err := newPathModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	rnd := rand.New(rand.NewPCG(1, 2))

	// Within eu: 10 ms one way, ± 2 ms, 1% lost.
	const n = 200000
	var drops int
	lo, hi := time.Hour, time.Duration(0)
	for range n {
		d, drop := m.decide("eu", "eu", rnd)
		if drop {
			drops++
			continue
		}
		lo, hi = min(lo, d), max(hi, d)
	}
	if lo < 8*time.Millisecond || hi > 12*time.Millisecond || hi-lo < 3*time.Millisecond {
		t.Errorf("eu-eu delays in [%v, %v], want spread over [8ms, 12ms]", lo, hi)
	}
	if f := float64(drops) / n; f < 0.008 || f > 0.012 {
		t.Errorf("eu-eu loss %.4f, want about 0.01", f)
	}

	// The link applies both ways: 50 ms, no jitter, 20% lost.
	drops = 0
	for i := range n {
		src, dst := "eu", "us"
		if i%2 == 1 {
			src, dst = dst, src
		}
		d, drop := m.decide(src, dst, rnd)
		if drop {
			drops++
		} else if d != 50*time.Millisecond {
			t.Fatalf("%s->%s delay %v, want 50ms", src, dst, d)
		}
	}
	if f := float64(drops) / n; f < 0.19 || f > 0.21 {
		t.Errorf("eu-us loss %.4f, want about 0.2", f)
	}
	if d, drop := m.decide("us", "us", rnd); d != 15*time.Millisecond || drop {
		t.Errorf("us-us: %v drop %v, want 15ms", d, drop)
	}
	// An address outside the regions (none in the namespace network, but
	// the model must not invent a delay for it).
	if d, drop := m.decide("", "eu", rnd); d != 0 || drop {
		t.Errorf("unknown region: %v drop %v, want no delay", d, drop)
	}

	// The same seed gives the same decisions.
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 1000 {
		d1, x1 := m.decide("eu", "eu", a)
		d2, x2 := m.decide("eu", "eu", b)
		if d1 != d2 || x1 != x2 {
			t.Fatal("decisions differ under the same seed")
		}
	}

	// Jitter never reorders a flow: a packet leaves no earlier than the
	// one before it.
	now := time.Unix(1000, 0)
	last := now.Add(12 * time.Millisecond)
	if got := delayReleaseAt(now.Add(time.Millisecond), 8*time.Millisecond, last); !got.Equal(last) {
		t.Errorf("release %v, want held until the previous packet's %v", got, last)
	}
	if got := delayReleaseAt(now, 20*time.Millisecond, last); !got.Equal(now.Add(20 * time.Millisecond)) {
		t.Errorf("release %v, want now+20ms", got)
	}
}

func TestNetnsPathModelErrors(t *testing.T) {
	eu := RegionSpec{Name: "eu", RTT: 20 * time.Millisecond}
	us := RegionSpec{Name: "us", RTT: 20 * time.Millisecond}
	for _, c := range []struct {
		name string
		spec NetworkSpec
		want string
	}{
		{"missing link", NetworkSpec{Regions: []RegionSpec{eu, us}}, "no link between"},
		{"unknown region", NetworkSpec{Regions: []RegionSpec{eu}, Links: []LinkSpec{{Between: [2]string{"eu", "mars"}}}}, "mars"},
		{"repeated region", NetworkSpec{Regions: []RegionSpec{eu, eu}}, "repeated"},
		{"loss of one", NetworkSpec{Regions: []RegionSpec{{Name: "x", Loss: 1}}}, "loss"},
		{"negative rtt", NetworkSpec{Regions: []RegionSpec{{Name: "x", RTT: -time.Millisecond}}}, "rtt"},
		{"link twice", NetworkSpec{Regions: []RegionSpec{eu, us}, Links: []LinkSpec{
			{Between: [2]string{"eu", "us"}}, {Between: [2]string{"us", "eu"}}}}, "twice"},
	} {
		if _, err := newPathModel(c.spec); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}
