package layers

import (
	"encoding/json"
	"errors"
	"testing"
)

func TestLayerMapBasics(t *testing.T) {
	m, err := NewLayerMap(10, 3, Stage{"b", Range{4, 10}}, Stage{"a", Range{0, 5}}, Stage{"c", Range{2, 3}})
	if err != nil {
		t.Fatal(err)
	}
	if got := m.Nodes(); got[0] != "a" || got[1] != "b" || got[2] != "c" {
		t.Errorf("stages not sorted: %v", got)
	}
	want := []int{1, 1, 2, 1, 2, 1, 1, 1, 1, 1}
	for l, c := range m.Coverage() {
		if c != want[l] {
			t.Fatalf("coverage %v, want %v", m.Coverage(), want)
		}
	}
	if !m.Covers() || m.Replication() != 1 || len(m.Gaps()) != 0 {
		t.Errorf("covers=%v replication=%d gaps=%v", m.Covers(), m.Replication(), m.Gaps())
	}
	g := m.Without("b")
	if gaps := g.Gaps(); len(gaps) != 1 || gaps[0] != (Range{5, 10}) {
		t.Errorf("gaps after removing b: %v", gaps)
	}
	if _, ok := m.Range("b"); !ok {
		t.Errorf("Without changed the receiver")
	}
	w := g.With("d", Range{5, 10}).With("a", Range{0, 6})
	if r, _ := w.Range("a"); r != (Range{0, 6}) || !w.Covers() || len(w.Stages) != 3 {
		t.Errorf("With: %+v", w)
	}
}

func TestLayerMapValidation(t *testing.T) {
	cases := []LayerMap{
		{Layers: 0},
		{Layers: 4, Stages: []Stage{{"a", Range{0, 5}}}},
		{Layers: 4, Stages: []Stage{{"a", Range{2, 2}}}},
		{Layers: 4, Stages: []Stage{{"a", Range{-1, 2}}}},
		{Layers: 4, Stages: []Stage{{"a", Range{0, 2}}, {"a", Range{2, 4}}}},
		{Layers: 4, Stages: []Stage{{"b", Range{0, 2}}, {"a", Range{2, 4}}}},
		{Layers: 4, Stages: []Stage{{"", Range{0, 2}}}},
	}
	for i, m := range cases {
		if err := m.Validate(); !errors.Is(err, ErrBadMap) {
			t.Errorf("case %d: want ErrBadMap, got %v", i, err)
		}
		if _, err := m.MarshalBinary(); err == nil {
			t.Errorf("case %d: encoded an invalid map", i)
		}
	}
}

func TestLayerMapRoundTrip(t *testing.T) {
	m, _ := NewLayerMap(80, 1<<40, Stage{"12D3KooWabc", Range{0, 40}}, Stage{"12D3KooWxyz", Range{39, 80}}, Stage{"n", Range{10, 11}})
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var got LayerMap
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if !got.Equal(m) {
		t.Fatalf("binary round trip: %+v != %+v", got, m)
	}
	// Same map built in another order encodes to the same bytes.
	m2, _ := NewLayerMap(80, 1<<40, Stage{"n", Range{10, 11}}, Stage{"12D3KooWxyz", Range{39, 80}}, Stage{"12D3KooWabc", Range{0, 40}})
	b2, _ := m2.MarshalBinary()
	if string(b) != string(b2) {
		t.Errorf("encoding depends on construction order")
	}
	j, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var fromJSON LayerMap
	if err := json.Unmarshal(j, &fromJSON); err != nil || !fromJSON.Equal(m) {
		t.Fatalf("json round trip: %v %+v", err, fromJSON)
	}
	if err := json.Unmarshal([]byte(`{"layers":4,"stages":[{"node":"a","start":3,"end":9}]}`), &fromJSON); !errors.Is(err, ErrBadMap) {
		t.Errorf("json with a bad range: %v", err)
	}
	// Corruptions are errors, never panics.
	for cut := 0; cut < len(b); cut++ {
		var x LayerMap
		if err := x.UnmarshalBinary(b[:cut]); err == nil {
			t.Errorf("truncated at %d decoded", cut)
		}
	}
	if err := got.UnmarshalBinary(append(b, 0)); !errors.Is(err, ErrBadMap) {
		t.Errorf("trailing byte: %v", err)
	}
}

// FuzzLayerMapDecode: any bytes either fail with ErrBadMap or decode to a
// valid map that re-encodes to the same bytes.
func FuzzLayerMapDecode(f *testing.F) {
	m, _ := NewLayerMap(8, 7, Stage{"a", Range{0, 4}}, Stage{"b", Range{3, 8}})
	b, _ := m.MarshalBinary()
	f.Add(b)
	f.Add([]byte("SLM1"))
	f.Add([]byte("SLM1\x00\x08\xff\xff\xff\xff\x0f"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var x LayerMap
		err := x.UnmarshalBinary(data)
		if err != nil {
			if !errors.Is(err, ErrBadMap) {
				t.Fatalf("error without ErrBadMap: %v", err)
			}
			return
		}
		if err := x.Validate(); err != nil {
			t.Fatalf("decoded an invalid map: %v", err)
		}
		again, err := x.MarshalBinary()
		if err != nil || string(again) != string(data) {
			t.Fatalf("re-encoding differs: %v", err)
		}
	})
}
