package layers

import (
	"reflect"
	"testing"

	"github.com/stratanet/strata/internal/goldentest"
)

// The layer map's encoding (carried in MapProposed records and monitor
// snapshots): overlapping stages, a large epoch, a stage id of many
// bytes. Decoding the golden bytes gives the map back.
func TestGoldenLayerMap(t *testing.T) {
	m, err := NewLayerMap(40, 1<<40+7,
		Stage{"12D3KooWHFrmLWTTDD4NodGmp4ttxvexGdXKXR5pejuR8XCbsTJy", Range{0, 16}},
		Stage{"b", Range{14, 30}},
		Stage{"c", Range{28, 40}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	gb := goldentest.Lines(t, "layermap.txt", []goldentest.Line{{Name: "layermap", Bytes: b}})[0].Bytes
	var got LayerMap
	if err := got.UnmarshalBinary(gb); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("golden bytes decode to %+v, want %+v", got, m)
	}
}
